"""make gpu-check: every GPU path of the project on this machine, in parallel lanes, by a deadline.

    python -m tools.gpucheck [--out build/gpu-check] [--deadline 420] [--dry]

The notebooks run in three lanes at once (09; 06-08; 00-05), each a `tools.report` process in
GPU_CHECK_PROFILE (default class), sharing one Inductor and Triton cache; a fourth lane runs
`pytest -m gpu` and `tools.gpuprobes`. At the deadline the running cell is interrupted and later
notebooks are not started. OUT gets 6 flat files: summary.md and summary.json (GPU, software,
each notebook's status, time, first error and figures, the tests, the probes), notebooks.tar.gz,
logs.tar.gz (lane logs with NCCL_DEBUG=WARN, each notebook's stderr: Dynamo recompiles and
graph breaks), trace.json.gz (Kineto, one training step) and env.txt (versions, arch list,
nvidia-smi -q). Exit status 1 if anything failed; without a GPU 2, unless --dry
(GPU_CHECK_DRY=1) hides CUDA and runs the same lanes in the ci profile, to test the harness.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from tools.alarms import output_texts
from tools.report import _cell, _hardware, render_figures, render_hardware

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DEFAULT_OUT = ROOT / "build" / "gpu-check"
# The longest first: 09 compiles five variants and trains; 06-08 launch torchrun; 00-05 measure.
LANES = [("09", ("09",)), ("06-08", ("06", "07", "08")),
         ("00-05", ("00", "01", "02", "03", "04", "05"))]
GRACE = 60       # seconds after the deadline for interrupted kernels to end and lanes to report
OUT_FILES = ("summary.md", "summary.json", "notebooks.tar.gz", "logs.tar.gz", "trace.json.gz",
             "env.txt")


def plan(notebooks: list[Path]) -> list[tuple[str, list[Path]]]:
    """Split the notebooks into LANES by their number; one not named there joins the last lane."""
    lanes = [(name, [nb for nb in notebooks if nb.name[:2] in prefixes])
             for name, prefixes in LANES]
    named = {p for _, prefixes in LANES for p in prefixes}
    lanes[-1][1].extend(nb for nb in notebooks if nb.name[:2] not in named)
    return [(name, paths) for name, paths in lanes if paths]


def select(notebooks: list[Path], wanted: str | None) -> list[Path]:
    """The notebooks whose numbers `wanted` lists ("01 03", GPU_CHECK_NOTEBOOKS); all if empty."""
    numbers = (wanted or "").replace(",", " ").split()
    unknown = sorted(set(numbers) - {nb.name[:2] for nb in notebooks})
    if unknown:
        raise ValueError(f"GPU_CHECK_NOTEBOOKS names no notebook numbered {', '.join(unknown)}; "
                         f"give two-digit numbers such as '01 03' (have "
                         f"{' '.join(nb.name[:2] for nb in notebooks)})")
    return [nb for nb in notebooks if not numbers or nb.name[:2] in numbers]


def lane_env(work: Path, dry: bool, gpus: int, profile: str) -> dict:
    """The environment of every lane: profile, GPUs expected, one compile cache, loud logs."""
    env = {**os.environ, "D2L_PROFILE": profile, "D2L_EXPECT_GPUS": str(gpus),
           "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"),
           "TRITON_CACHE_DIR": str(work / "triton"), "NCCL_DEBUG": "WARN",
           "TORCH_LOGS": "recompiles,graph_breaks", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if dry:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class Lane:
    """A group of commands run one after another in a process group of their own, with a log."""

    def __init__(self, name: str, commands: list[list[str]], log: Path, env: dict):
        self.name, self.commands, self.log, self.env = name, commands, log, env
        self.returncodes: list[int | None] = []
        self.process: subprocess.Popen | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with open(self.log, "w", encoding="utf-8") as log:
            for command in self.commands:
                log.write(f"$ {' '.join(command)}\n")
                log.flush()
                self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                                env=self.env, cwd=ROOT, start_new_session=True)
                self.returncodes.append(self.process.wait())

    def stop(self) -> None:
        """End the running command and all it started (kernels have sessions of their own)."""
        import psutil
        if not self.process or self.process.poll() is not None:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            family = [psutil.Process(self.process.pid)]
            family += family[0].children(recursive=True)
            for signal in ("terminate", "kill"):
                for p in family:
                    with contextlib.suppress(psutil.Error):
                        getattr(p, signal)()
                _, family = psutil.wait_procs(family, timeout=10)


def run_lanes(lanes: list[Lane], until: float) -> list[str]:
    """Start the lanes, wait until each ends or `until` (time.time()); return those stopped."""
    for lane in lanes:
        lane.thread.start()
    stopped = []
    for lane in lanes:
        lane.thread.join(max(0.0, until - time.time()))
        if lane.thread.is_alive():
            stopped.append(lane.name)
            lane.commands.clear()  # first, so that no later command of the lane starts
            lane.stop()
            lane.thread.join(15)
            lane.stop()
    return stopped


# ---------------------------------------------------------------- the summary

def notebook_rows(work: Path, lanes: list[tuple[str, list[Path]]],
                  stopped: list[str]) -> list[dict]:
    """One row per notebook from its lane's summary.json, or why the lane gave none."""
    rows = []
    for name, paths in lanes:
        summary = work / f"lane-{name}" / "summary.json"
        done = json.loads(summary.read_text()) if summary.is_file() else None
        by_name = {nb["notebook"]: nb for nb in (done or {}).get("notebooks", [])}
        for path in paths:
            nb = by_name.get(path.stem) or {
                "notebook": path.stem, "seconds": 0.0, "records": [], "alarms": [],
                "error": ("the lane was stopped after the deadline's grace" if name in stopped
                          else "the lane ended without a summary: see its log")}
            rows.append({**nb, "lane": name})
    return rows


def render(summary: dict) -> str:
    """summary.md: the machine, notebooks, tests and probes, then each notebook's figures."""
    out = [f"# make gpu-check{' (dry run: CUDA hidden)' if summary['dry'] else ''}", "",
           f"Generated {summary['generated']}, profile `{summary['profile']}`, deadline "
           f"{summary['deadline']} s, {summary['seconds']:.0f} s in all. The lanes ran at the same "
           "time on one machine, so each timing is a lower bound for a quiet one.", "",
           "## Machine", ""]
    out += render_hardware(summary.get("hardware"))
    out += ["", "## Notebooks", "",
            "| notebook | lane | status | seconds | figures | first error |",
            "| --- | --- | --- | --- | --- | --- |"]
    for nb in summary["notebooks"]:
        status = "FAILED" if nb.get("error") else "ok"
        out.append(f"| {nb['notebook']} | {nb['lane']} | {status} | {nb['seconds']:.1f} | "
                   f"{len(nb['records'])} | {_cell(nb.get('error') or '')[:200]} |")
    tests = summary["tests"]
    out += ["", "## Tests that need a GPU", "", f"`pytest -m gpu`: exit {tests['returncode']}, "
            f"{_cell(tests['result'])}", ""]
    if tests.get("unit"):
        out += [f"The other unit tests (GPU_CHECK_UNIT={tests['unit_arg']}): "
                f"{_cell(tests['unit'])}", ""]
    out += ["## Probes", ""]
    out += [f"- **{p['probe']}** ({p.get('seconds', 0):.1f} s): {_cell(p['line'])}"
            for p in summary["probes"]] or ["(the probes did not report)"]
    for nb in summary["notebooks"]:
        out += ["", f"## {nb['notebook']}", ""] + render_figures(nb)
    return "\n".join(out) + "\n"


def pytest_result(log: Path, first: bool = False) -> str:
    """The last (or first) summary line pytest printed ('3 passed, 1 skipped in 4.2s')."""
    if not log.is_file():
        return "no log"
    found = [ln.strip("= ") for ln in log.read_text(errors="replace").splitlines()
             if re.search(r"\d+ (passed|failed|skipped|deselected|errors?)\b|no tests ran", ln)
             and not ln.startswith(("SKIPPED", "FAILED", "ERROR"))]
    return found[0 if first else -1] if found else "no summary line: see logs.tar.gz"


def notebook_stderr(path: Path) -> str:
    """The stderr streams of an executed notebook (Dynamo's logs, NCCL warnings), by cell."""
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    texts = [(i, "".join(output_texts(c.get("outputs", []), ("stderr",), False, False)))
             for i, c in enumerate(cells)]
    return "\n".join(f"--- cell {i}\n{text}" for i, text in texts if text)


def pack(out: Path, work: Path) -> None:
    """Archive the executed notebooks and the logs into OUT, beside the trace and env.txt."""
    executed = sorted(work.glob("lane-*/notebooks/*.ipynb"))
    with tarfile.open(out / "notebooks.tar.gz", "w:gz") as tar:
        for path in executed:
            tar.add(path, arcname=f"notebooks/{path.name}")
    logs = work / "logs"
    for path in executed:
        text = notebook_stderr(path)
        if text:
            (logs / f"{path.stem}.stderr.txt").write_text(text, encoding="utf-8")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        tar.add(logs, arcname="logs")
    for name in ("trace.json.gz", "env.txt"):
        if (work / "probes" / name).is_file():
            (work / "probes" / name).replace(out / name)


# ---------------------------------------------------------------- the whole check

def check(out: Path, deadline: float, dry: bool, profile: str, unit: str = "",
          notebooks: list[Path] | None = None) -> int:
    """Run the lanes, the GPU tests and the probes; write OUT; return 0 if all passed, else 1."""
    import torch
    gpus = 0 if dry else torch.cuda.device_count()
    for name in OUT_FILES:  # one check is one run: no file of an earlier one stays
        (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        (work / "logs").mkdir()
        env = lane_env(work, dry, gpus, profile)
        py = sys.executable
        notebooks = plan(sorted(NOTEBOOKS.glob("*.ipynb")) if notebooks is None else notebooks)
        lanes = [Lane(name, [[py, "-m", "tools.report", "--out", str(work / f"lane-{name}"),
                              "--deadline", str(start + deadline), "--cell-timeout",
                              str(deadline), *map(str, paths)]],
                      work / "logs" / f"lane-{name}.log", env) for name, paths in notebooks]
        lanes.append(Lane("checks", [
            [py, "-m", "pytest", "-m", "gpu", "tests", "-q", "-p", "no:cacheprovider",
             f"--timeout={int(deadline)}", "-o", "addopts=-ra"],
            [py, "-m", "tools.gpuprobes", "--out", str(work / "probes")]]
            # GPU_CHECK_UNIT=1: then every other unit test, as the GPU runner's make test would
            + ([[py, "-m", "pytest", "-m", "not gpu", *unit_tests(unit), "-v", "-p",
                 "no:cacheprovider", "-n", "2", "--timeout=300", "-o", "addopts=-ra"]]
               if unit else []),
            work / "logs" / "checks.log", env))
        print(f"gpu-check: {gpus} GPU(s){', CUDA hidden (dry run)' if dry else ''}, profile "
              f"{profile}, lanes {', '.join(lane.name for lane in lanes)}; "
              f"deadline {deadline:.0f} s", flush=True)
        stopped = run_lanes(lanes, start + deadline + GRACE)
        os.environ.update(D2L_PROFILE=profile, D2L_EXPECT_GPUS=str(gpus))
        hw, _ = _hardware()
        probes_file = work / "probes" / "probes.json"
        checks = lanes[-1]
        summary = {
            "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "dry": dry, "profile": profile, "deadline": deadline, "hardware": hw,
            "notebooks": notebook_rows(work, notebooks, stopped),
            "tests": {"returncode": checks.returncodes[0] if checks.returncodes else None,
                      "unit_arg": unit,
                      "result": pytest_result(checks.log, first=True),
                      "unit": (pytest_result(checks.log) + f" (exit {checks.returncodes[2]})"
                               if len(checks.returncodes) > 2 else
                               "stopped at the deadline" if unit else None)},
            "probes": json.loads(probes_file.read_text()) if probes_file.is_file() else [],
            "stopped": stopped, "seconds": time.time() - start}
        summary["failed"] = ([nb["notebook"] for nb in summary["notebooks"] if nb.get("error")]
                             + (["tests"] if summary["tests"]["returncode"] not in (0, 5) else [])
                             + (["unit tests"] if unit and checks.returncodes[2:] != [0] else [])
                             + [p["probe"] for p in summary["probes"] if p.get("failed")]
                             + ([] if probes_file.is_file() else ["probes"]))
        pack(out, work)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n",
                                      encoding="utf-8")
    (out / "summary.md").write_text(render(summary), encoding="utf-8")
    for nb in summary["notebooks"]:
        print(f"gpu-check: {nb['notebook']} [{nb['lane']}] "
              f"{'FAILED: ' + str(nb['error'])[:160] if nb.get('error') else 'ok'} "
              f"({nb['seconds']:.0f} s)")
    print(f"gpu-check: tests {summary['tests']['result']}")
    for p in summary["probes"]:
        print(f"gpu-check: probe {p['probe']}: {p['line']}")
    print(f"gpu-check: {summary['seconds']:.0f} s; summary in {out / 'summary.md'}"
          + (f"; FAILED: {', '.join(summary['failed'])}" if summary["failed"] else ""))
    return 1 if summary["failed"] else 0


def _unit(value: str | None) -> str:
    value = (value or "").strip()
    return "" if value.lower() in ("0", "no", "false") else value


def unit_tests(unit: str) -> list[str]:
    """GPU_CHECK_UNIT: 1 (every test in tests/) or the test files to run, as pytest takes them."""
    return ["tests"] if _flag(unit) else unit.split()


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "yes", "true")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=Path(os.environ.get("GPU_CHECK_OUT") or DEFAULT_OUT),
                        help="folder for the 6 files (default: GPU_CHECK_OUT or build/gpu-check)")
    parser.add_argument("--deadline", type=float,
                        default=float(os.environ.get("GPU_CHECK_DEADLINE") or 420),
                        help="seconds after which running notebooks are stopped (default 420)")
    parser.add_argument("--dry", action="store_true",
                        default=_flag(os.environ.get("GPU_CHECK_DRY")),
                        help="hide CUDA and run the same lanes on the CPU (GPU_CHECK_DRY=1)")
    args = parser.parse_args(argv)
    if args.deadline <= 0:
        parser.error(f"--deadline must be a positive number of seconds, got {args.deadline:g}")
    if args.dry:  # before torch initializes CUDA in this process
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch
    if not args.dry and not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU is visible here (torch "
              f"{torch.__version__}); run it on a GPU machine, or GPU_CHECK_DRY=1 to test the "
              "harness on this CPU", file=sys.stderr)
        return 2
    from d2l_extras.profiles import PROFILES
    profile = os.environ.get("GPU_CHECK_PROFILE") or ("ci" if args.dry else "class")
    if profile not in PROFILES:
        parser.error(f"GPU_CHECK_PROFILE={profile!r}: choose one of {', '.join(PROFILES)}")
    try:
        notebooks = select(sorted(NOTEBOOKS.glob("*.ipynb")), os.environ.get("GPU_CHECK_NOTEBOOKS"))
    except ValueError as err:
        parser.error(str(err))
    return check(args.out.resolve(), args.deadline, args.dry, profile,
                 _unit(os.environ.get("GPU_CHECK_UNIT")), notebooks)


if __name__ == "__main__":
    sys.exit(main())
