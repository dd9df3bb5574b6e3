"""make report: run every notebook, keep the executed copies, and summarize what they measured.

    python -m tools.report [--out build/report] [notebooks/NN-name.ipynb ...]

Each notebook runs in a fresh kernel of this interpreter, in the active profile; its
`dx.record(...)` calls (and notebooks/records/NN-name.py, run after its last cell) land in
OUT/records.jsonl. OUT gets notebooks/ (executed copies), summary.md and summary.json (hardware,
each notebook's result, run time and figures). Exit status 1 when a notebook failed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DEFAULT_OUT = ROOT / "build" / "report"
RECORDS_DIR = "records"  # notebooks/records/NN-name.py: each notebook's dx.record calls
EXECUTED = "notebooks"  # OUT/notebooks/: the executed copies, which the slides and HTML build from


def _current_python_kernel_manager():
    """A kernel manager class whose kernel is this interpreter, whatever kernels are installed."""
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict  # names sys.executable
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class ThisPythonSpecs(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return self.kernel_spec_class(resource_dir=RESOURCES, **get_kernel_dict())

    class ThisPythonKernelManager(AsyncKernelManager):
        @default("kernel_spec_manager")
        def _default_specs(self):
            return ThisPythonSpecs(data_dir=self.data_dir)

    return ThisPythonKernelManager


def execute_notebook(source: Path, target: Path, env: dict, cell_timeout: float,
                     deadline: float | None = None) -> str | None:
    """Run `source` in a kernel of this Python, save it to `target`; return the error or None."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(source, as_version=4)
    records = records_source(source)
    if records:  # run after the last cell, left out of the executed copy
        nb.cells.append(nbformat.v4.new_code_cell(records))
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="this-python",
                            kernel_manager_class=_current_python_kernel_manager(),
                            resources={"metadata": {"path": str(source.parent)}})
    if deadline is not None:  # a time.time(): interrupt as Ctrl-C would (dx.launch cleans up)
        client.timeout_func = lambda cell: max(1, min(cell_timeout, int(deadline - time.time())))
        client.interrupt_on_timeout = True
        client.error_on_timeout = {"ename": "DeadlineExceeded", "traceback": [],
                                   "evalue": "interrupted at the deadline"}
    error = None
    try:
        client.execute(env=env)
    except Exception as err:  # a failing cell, a dead kernel, a timeout: all end this notebook
        error = _describe(err, nb)
        if records and error.startswith(f"cell {len(nb.cells) - 1}:"):
            error = f"{RECORDS_DIR}/{source.stem}.py:" + error.partition(":")[2]
    finally:
        if records:
            nb.cells.pop()
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
    return error


def records_source(notebook: Path) -> str | None:
    """The code that records what `notebook` measured (notebooks/records/), or None."""
    path = Path(notebook).parent / RECORDS_DIR / f"{Path(notebook).stem}.py"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _describe(err: Exception, nb) -> str:
    # CellExecutionError carries ename/evalue; the cell is the last one with an error output.
    last = str(err).strip().splitlines()[-1:] or [""]
    what = (f"{err.ename}: {err.evalue}" if getattr(err, "ename", None)
            else f"{type(err).__name__}: {last[0]}")
    for index, cell in enumerate(nb.cells):
        if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            return f"cell {index}: {what}"
    return what


def notebook_alarms(path: Path) -> list[tuple[int, str, str]]:
    """Return (cell index, pattern name, line) for each alarm line in an executed notebook."""
    from tools.alarms import alarm_lines
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [(i, name, line) for i, cell in enumerate(nb.get("cells", []))
            for name, line in alarm_lines(cell.get("outputs", []))]


def summarize(runs: list[dict], records: list[dict], hardware: dict | None,
              hardware_error: str | None = None, profile: str = "") -> dict:
    """Group the records by notebook, in the order the notebooks ran, beside their run results."""
    order = [run["notebook"] for run in runs]
    groups: dict[str, list[dict]] = {name: [] for name in order}
    for row in records:
        name = row.get("notebook") or ""
        groups.setdefault(name, []).append(
            {k: row.get(k) for k in ("key", "value", "unit", "note")})
    notebooks = [{**run, "records": groups[run["notebook"]]} for run in runs]
    other = {name: rows for name, rows in groups.items() if name not in order}
    return {"generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": sys.executable, "profile": profile, "hardware": hardware,
            "hardware_error": hardware_error, "notebooks": notebooks,
            "other_records": other,  # recorded under a name that is not a notebook run
            "failed": [run["notebook"] for run in runs if run.get("error")],
            "total_seconds": round(sum(run.get("seconds", 0.0) for run in runs), 1)}


def _value(v) -> str:
    return f"{v:.4g}" if isinstance(v, (int, float)) else str(v)


def _cell(text) -> str:
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")


def render_hardware(hardware: dict | None, error: str | None = None) -> list[str]:
    """Markdown lines for a dx.hardware_report(verbose=False) dictionary."""
    from d2l_extras.hardware import hardware_rows
    lines = [f"**Hardware check failed:** {_cell(error)}", ""] if error else []
    rows = [f"| {k} | {_cell(v)} |" for k, v in hardware_rows(hardware)] if hardware else []
    return lines + (["| | |", "| --- | --- |", *rows] if rows else ["(no hardware report)"])


def render_markdown(summary: dict) -> str:
    """The summary as Markdown: hardware, one line per notebook, then each notebook's figures."""
    out = [f"# Measured figures, profile `{summary['profile']}`", "",
           f"Generated {summary['generated']} by `{summary['python']}`. Every figure below was "
           "measured in this run; executed notebooks are in `notebooks/` beside this file.", "",
           "## Hardware", "", *render_hardware(summary["hardware"], summary.get("hardware_error")),
           "", "## Notebooks", "", "| notebook | result | run time | figures | alarm lines |",
           "| --- | --- | --- | --- | --- |"]
    out += [f"| {nb['notebook']} | {'FAILED' if nb.get('error') else 'ok'} | {nb['seconds']:.1f} s"
            f" | {len(nb['records'])} | {len(nb.get('alarms', []))} |"
            for nb in summary["notebooks"]]
    out.append(f"\nTotal: {summary['total_seconds']:.1f} s. "
               + (f"Failed: {', '.join(summary['failed'])}." if summary["failed"]
                  else "No notebook failed.") + " " + describe_load(summary.get("machine_load")))
    groups = [(nb["notebook"], nb) for nb in summary["notebooks"]]
    for name, nb in groups + [(n, {"records": r}) for n, r in summary["other_records"].items()]:
        out += ["", f"## {name or '(no notebook named)'}", ""]
        if nb.get("error"):
            out += [f"**Failed** after {nb['seconds']:.1f} s: {_cell(nb['error'])}", ""]
        out += render_figures(nb)
    return "\n".join(out) + "\n"


def render_figures(nb: dict) -> list[str]:
    """Markdown lines for one notebook's alarm lines, then a table of its recorded figures."""
    out = [f"- alarm line in cell {cell} ({pattern}): `{_cell(line)}`"
           for cell, pattern, line in nb.get("alarms", [])]
    out += [""] * bool(out)
    if not nb["records"]:
        return out + ["(no figures recorded)"]
    return out + ["| figure | value | unit | note |", "| --- | --- | --- | --- |"] + [
        f"| {_cell(r['key'])} | {_value(r['value'])} | {_cell(r['unit'])} | {_cell(r['note'])} |"
        for r in nb["records"]]


def write_summary(out: Path, summary: dict) -> None:
    """Write summary.json and summary.md into `out`."""
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(render_markdown(summary), encoding="utf-8")


def _hardware() -> tuple[dict | None, str | None]:
    import d2l_extras as dx
    try:
        return dx.hardware_report(verbose=False), None
    except (RuntimeError, ValueError) as err:  # GPUs expected but missing, a bad profile
        return None, str(err)


def _busy_seconds() -> float:
    # CPU seconds the whole machine spent busy, and this process with its children (kernels and
    # the processes they started, once reaped): what others used is the difference.
    import psutil
    machine, own = psutil.cpu_times(), os.times()
    return (sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
            - own.user - own.system - own.children_user - own.children_system)


def machine_load(others: float, seconds: float, cores: int | None = None) -> dict:
    """How busy other processes kept the machine: `others` CPU-seconds over `seconds` of wall
    time; busy when they took a quarter of the cores or more (the decks' numbers then mislead)."""
    cores = cores or os.cpu_count() or 1
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    share = max(0.0, others) / seconds
    return {"others_cores": round(share, 2), "cores": cores, "busy": share >= cores / 4}


def describe_load(load: dict | None) -> str:
    """One line: how busy the machine was while the notebooks ran, a warning if it was."""
    if not load:
        return "machine load: not measured (a run from before this was recorded)"
    line = (f"machine load: other processes kept {load['others_cores']:.1f} of "
            f"{load['cores']} cores busy while the notebooks ran")
    return (f"warning: {line}: its timings are unreliable; rebuild on a quiet machine"
            if load["busy"] else line + " (quiet)")


def report(paths: list[Path], out: Path, cell_timeout: float = 900,
           execute: Callable = execute_notebook,
           hardware: Callable[[], tuple[dict | None, str | None]] = _hardware,
           deadline: float | None = None) -> int:
    """Run the notebooks, write the summary under `out`; return 1 if one failed, else 0.
    At a `deadline` (time.time()) the running notebook is interrupted and later ones not started."""
    from d2l_extras.profiles import profile
    from d2l_extras.report import ENV_VAR, RECORDS, read_records

    out = out.resolve()
    # One report is one run: drop the records and executed copies of an earlier run.
    shutil.rmtree(out / EXECUTED, ignore_errors=True)
    (out / RECORDS).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    hw, hw_error = hardware()
    runs, busy_start, wall_start = [], _busy_seconds(), time.perf_counter()
    for path in paths:
        name, target = path.stem, out / EXECUTED / path.name
        env = {**os.environ, ENV_VAR: str(out), "D2L_REPORT_NOTEBOOK": name}
        print(f"report: running {path.name} ...", flush=True)
        start = time.perf_counter()
        if deadline is None:
            error = execute(path, target, env, cell_timeout)
        elif time.time() >= deadline:
            error = "not started: the deadline had passed"
        else:
            error = execute(path, target, env, cell_timeout, deadline=deadline)
        seconds = time.perf_counter() - start
        alarms = notebook_alarms(target) if target.exists() else []
        print(f"report: {path.name} {'FAILED: ' + error if error else 'ok'} ({seconds:.1f} s)",
              flush=True)
        runs.append({"notebook": name, "executed": str(target), "seconds": round(seconds, 2),
                     "error": error, "alarms": alarms})
    try:
        active = profile()
    except ValueError:  # a misspelt D2L_PROFILE: every notebook has failed with the reason
        active = os.environ.get("D2L_PROFILE", "")
    summary = summarize(runs, read_records(out), hw, hw_error, active)
    summary["machine_load"] = machine_load(_busy_seconds() - busy_start,
                                           time.perf_counter() - wall_start)
    write_summary(out, summary)
    print("report: " + describe_load(summary["machine_load"]))
    print(f"report: summary in {out / 'summary.md'} and {out / 'summary.json'}")
    if summary["failed"]:
        print(f"report: FAILED notebooks: {', '.join(summary['failed'])}", file=sys.stderr)
    return 1 if summary["failed"] or hw_error else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the notebooks and summarize their figures.")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--cell-timeout", type=float, default=900, help="seconds a cell may run")
    parser.add_argument("--deadline", type=float, help="a time.time(): stop the notebooks then")
    parser.add_argument("--runs", type=int, default=1, help="more than one: OUT/run-N each, "
                        "then the readings whose words changed (tools/readings.py)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    paths = notebook_args(parser, args.notebooks)
    outs = [args.out] if args.runs == 1 else [args.out / f"run-{r + 1}" for r in range(args.runs)]
    status = max([report(paths, out, args.cell_timeout, deadline=args.deadline) for out in outs])
    if args.runs == 1:
        return status
    from tools import readings
    return max(status, readings.main([str(out) for out in outs]))


def notebook_args(parser: argparse.ArgumentParser, given: list[Path]) -> list[Path]:
    """The notebooks named on a command line, or every notebooks/*.ipynb; exit if one is not."""
    paths = [p.resolve() for p in given] or sorted(NOTEBOOKS.glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    return paths


if __name__ == "__main__":
    sys.exit(main())
