"""make gpu-check: every GPU path of the project on this machine, in parallel lanes, by a deadline.

Lanes at once: the notebooks (09; 06-08; 00-05: tools.report in GPU_CHECK_PROFILE, default class,
one compile cache), `pytest -m gpu` (tests/test_gpu_probes.py's probes among them; then the tests
GPU_CHECK_UNIT names, 1 for all), env.txt. Running cells are interrupted at GPU_CHECK_DEADLINE,
the rest killed GRACE later. GPU_CHECK_OUT gets OUT_FILES. Exit 1 if anything failed; 2 without a
GPU, unless GPU_CHECK_DRY=1 (CUDA hidden, ci profile). GPU_CHECK_NOTEBOOKS="01 03": some only.
"""
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from tools.alarms import output_texts
from tools.report import NOTEBOOKS, ROOT, _hardware, render_markdown, summarize

# The longest first: 09 compiles five variants and trains; 06-08 launch torchrun; 00-05 measure.
LANES = {"09": ("09",), "06-08": ("06", "07", "08"), "00-05": ("00", "01", "02", "03", "04", "05")}
GRACE = 60  # seconds after the deadline for interrupted kernels to end and lanes to report
PYTEST = ["pytest", "-p", "no:cacheprovider", "-o", "junit_family=xunit1"]  # xunit2: no properties
OUT_FILES = ("summary.md", "summary.json", "notebooks.tar.gz", "logs.tar.gz", "trace.json.gz",
             "env.txt")


def plan(notebooks: list[Path]) -> dict[str, list[Path]]:
    """Split the notebooks into LANES by their number; one not named there joins the last lane."""
    named, last = {p for prefixes in LANES.values() for p in prefixes}, list(LANES)[-1]
    lanes = {lane: [nb for nb in notebooks if nb.name[:2] in prefixes
                    or (lane == last and nb.name[:2] not in named)]
             for lane, prefixes in LANES.items()}
    return {lane: paths for lane, paths in lanes.items() if paths}


def select(notebooks: list[Path], wanted: str) -> list[Path]:
    """The notebooks whose numbers `wanted` lists ("01 03", GPU_CHECK_NOTEBOOKS); all if empty."""
    numbers, have = wanted.replace(",", " ").split(), [nb.name[:2] for nb in notebooks]
    if unknown := sorted(set(numbers) - set(have)):
        raise ValueError(f"GPU_CHECK_NOTEBOOKS names no notebook numbered {', '.join(unknown)}; "
                         f"give two-digit numbers such as '01 03' (have {' '.join(have)})")
    return [nb for nb in notebooks if not numbers or nb.name[:2] in numbers]


def run_lanes(lanes: dict[str, list[list]], logs: Path, env: dict, until: float) -> list[str]:
    """Run each lane's commands in turn into logs/LANE.log; kill what runs at `until`; name it."""
    import psutil
    procs, stopped = {}, []
    for lane, commands in lanes.items():
        script = "; ".join(shlex.join(map(str, command)) for command in commands)
        with open(logs / f"{lane}.log", "w") as log:  # sh -x logs each command
            procs[lane] = subprocess.Popen(["sh", "-xc", script], stdout=log, stderr=log,
                                           env=env, cwd=ROOT, start_new_session=True)
    for lane, proc in procs.items():
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, until - time.time()))
            continue
        stopped.append(lane)
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            family = psutil.Process(proc.pid).children(recursive=True)  # kernels: own sessions
            os.killpg(proc.pid, signal.SIGKILL)  # sh too, so that it starts nothing more
            for p in family:
                with contextlib.suppress(psutil.Error):
                    p.kill()
        proc.wait()
    return stopped


def notebook_rows(work: Path, lanes: dict[str, list[Path]], stopped: list[str]) -> list[dict]:
    """One row per notebook from its lane's summary.json, or why the lane gave none."""
    rows = []
    for lane, paths in lanes.items():
        done = work / f"lane-{lane}" / "summary.json"
        done = {nb["notebook"]: nb for nb in json.loads(done.read_text())["notebooks"]
                } if done.is_file() else {}
        why = ("was stopped after the deadline's grace" if f"lane-{lane}" in stopped
               else "ended without a summary")
        rows += [{**done.get(p.stem, {"notebook": p.stem, "seconds": 0.0, "records": [],
                                      "error": f"the lane {why}: see logs.tar.gz"}), "lane": lane}
                 for p in paths]
    return rows


def junit(xml: Path) -> dict:
    """A pytest run's outcome counts, failed tests and probe lines, from its JUnit XML."""
    cases = list(ET.parse(xml).getroot().iter("testcase")) if xml.is_file() else []
    outcome = {c: next((e.tag for e in c if e.tag in ("failure", "error", "skipped")), "passed")
               for c in cases}
    return {"counts": dict(Counter(outcome.values())),
            "failed": [c.get("name") for c in cases if outcome[c] in ("failure", "error")],
            "probes": [f"{c.get('name')}: {p.get('value')}" for c in cases
                       for p in c.iter("property") if p.get("name") == "probe"]}


def render(summary: dict) -> tuple[str, str]:
    """The check's own lines (lanes, tests, probes), and summary.md: tools.report's with them."""
    lines = [f"\nThe lanes ran side by side, {summary['seconds']:.0f} s in all (deadline "
             f"{summary['deadline']:.0f} s), so each time is an upper bound for a quiet machine. "
             "Lanes: "
             + ", ".join(f"{nb['notebook']} in {nb['lane']}" for nb in summary["notebooks"])
             + f"; killed at the deadline's grace: {', '.join(summary['stopped']) or 'none'}."]
    for command, t in summary["tests"].items():
        counts = ", ".join(f"{n} {k}" for k, n in t["counts"].items()) or "no JUnit XML"
        lines += ["", f"## `{command}`: {counts}", ""] + [f"- FAILED {n}" for n in t["failed"]]
        lines += [f"- probe {p}" for p in t["probes"]]
    title = "# make gpu-check" + " (dry run: CUDA hidden)" * summary["dry"]
    md = render_markdown(summary).replace("# Measured", "## Measured")
    return "\n".join(lines), "\n".join([title, *lines, "", md.replace(
        "in `notebooks/` beside", "in notebooks.tar.gz beside")])


def pack(out: Path, work: Path) -> None:
    """notebooks.tar.gz: the executed notebooks; logs.tar.gz: the logs, each notebook's stderr."""
    executed = sorted(work.glob("lane-*/notebooks/*.ipynb"))
    for path in executed:  # Dynamo's recompiles and graph breaks, NCCL's warnings, by cell
        cells = json.loads(path.read_text())["cells"]
        texts = [f"--- cell {i}\n{text}" for i, c in enumerate(cells) if (text := "".join(
            output_texts(c.get("outputs", []), ("stderr",), False, False)))]
        if texts:
            (work / "logs" / f"{path.stem}.stderr.txt").write_text("\n".join(texts))
    with tarfile.open(out / "notebooks.tar.gz", "w:gz") as tar:
        for path in executed:
            tar.add(path, arcname=f"notebooks/{path.name}")
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        tar.add(work / "logs", arcname="logs")


def check(out: Path, deadline: float, dry: bool, profile: str, unit: list[str],
          notebooks: list[Path]) -> int:
    """Run the lanes by the deadline; write OUT_FILES to `out`; return 0 if all passed, else 1."""
    import torch
    gpus, start, lanes = 0 if dry else torch.cuda.device_count(), time.time(), plan(notebooks)
    out.mkdir(parents=True, exist_ok=True)
    for name in OUT_FILES:  # one check is one run: no file of an earlier one stays
        (out / name).unlink(missing_ok=True)
    tmp = tempfile.TemporaryDirectory(prefix="gpu-check-")
    work, logs, py = Path(tmp.name), Path(tmp.name, "logs"), [sys.executable, "-m"]
    logs.mkdir()
    env = {**os.environ, "D2L_PROFILE": profile, "D2L_EXPECT_GPUS": str(gpus),
           "TORCHINDUCTOR_CACHE_DIR": f"{work}/inductor", "TRITON_CACHE_DIR": f"{work}/triton",
           "NCCL_DEBUG": "WARN", "TORCH_LOGS": "recompiles,graph_breaks", "PYTHONUNBUFFERED": "1",
           "GPU_CHECK_TRACE_DIR": str(out), "PYTHONPATH": os.pathsep.join(
               filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env |= {"CUDA_VISIBLE_DEVICES": ""} if dry else {}
    tests = {"pytest -m gpu tests": [*py, *PYTEST, "-m", "gpu", "tests", f"--timeout={deadline}"]}
    if unit:  # the other unit tests, as the GPU runner's make test would run them
        tests[f"pytest -m 'not gpu' {' '.join(unit)}"] = [*py, *PYTEST, "-m", "not gpu", *unit,
                                                          "-n", "2", "--timeout=300"]
    commands = {f"lane-{lane}": [[*py, "tools.report", "--out", f"{work}/lane-{lane}", "--deadline",
                                  str(start + deadline), "--cell-timeout", str(deadline), *paths]]
                for lane, paths in lanes.items()}
    commands["checks"] = [[*c, f"--junitxml={logs}/pytest-{i}.xml"]
                          for i, c in enumerate(tests.values())]
    # The version line first: torch 2.6's collect_env fails where pip is missing.
    commands["env"] = [[sys.executable, "-c", "import torch; print('torch', torch.__version__)"],
                       [sys.executable, "-W", "ignore::RuntimeWarning", "-m",  # runpy's, harmless
                        "torch.utils.collect_env"]] + [["nvidia-smi", "-q"]] * bool(
                            shutil.which("nvidia-smi"))
    print(f"gpu-check: {gpus} GPU(s){', CUDA hidden (dry run)' * dry}, profile {profile}, lanes "
          f"{', '.join(commands)}; deadline {deadline:.0f} s", flush=True)
    stopped = run_lanes(commands, logs, env, start + deadline + GRACE)
    os.environ.update(D2L_PROFILE=profile, D2L_EXPECT_GPUS=str(gpus))  # as the lanes had them
    rows = notebook_rows(work, lanes, stopped)
    summary = summarize(rows, [{**r, "notebook": nb["notebook"]} for nb in rows
                               for r in nb["records"]], *_hardware(), profile) | {
        "dry": dry, "deadline": deadline, "stopped": stopped, "seconds": time.time() - start,
        "tests": {name: junit(logs / f"pytest-{i}.xml") for i, name in enumerate(tests)}}
    summary["failed"] += [name for name, t in summary["tests"].items()
                          if t["failed"] or not t["counts"]]
    pack(out, work)
    shutil.copy(logs / "env.log", out / "env.txt")
    tmp.cleanup()
    status, text = render(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "summary.md").write_text(text)
    print(f"{status}\n\ngpu-check: {summary['seconds']:.0f} s, summary in {out / 'summary.md'}; "
          + (f"FAILED: {', '.join(summary['failed'])}" if summary["failed"] else "all passed"))
    return 1 if summary["failed"] else 0


def main() -> int:
    """Read the GPU_CHECK_* settings (the module's docstring), refuse a bad one (2), check."""
    get = os.environ.get
    dry = get("GPU_CHECK_DRY", "").strip().lower() in ("1", "yes", "true")
    if dry:  # before torch initializes CUDA in this process
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch
    from d2l_extras.profiles import PROFILES
    profile = get("GPU_CHECK_PROFILE") or ("ci" if dry else "class")
    try:
        if (deadline := float(get("GPU_CHECK_DEADLINE") or 420)) <= 0:
            raise ValueError(f"GPU_CHECK_DEADLINE={deadline:g}: give a positive number of seconds")
        if profile not in PROFILES:
            raise ValueError(f"GPU_CHECK_PROFILE={profile!r}: choose one of {', '.join(PROFILES)}")
        notebooks = select(sorted(NOTEBOOKS.glob("*.ipynb")), get("GPU_CHECK_NOTEBOOKS", ""))
        if not dry and not torch.cuda.is_available():
            raise ValueError(f"no CUDA GPU is visible here (torch {torch.__version__}); run it on "
                             "a GPU machine, or GPU_CHECK_DRY=1 to test the harness on this CPU")
    except ValueError as err:
        print(f"gpu-check: {err}", file=sys.stderr)
        return 2
    unit = get("GPU_CHECK_UNIT", "").strip()
    unit = [] if unit.lower() in ("", "0", "no", "false") else (
        ["tests"] if unit.lower() in ("1", "yes", "true") else unit.split())
    return check(Path(get("GPU_CHECK_OUT") or ROOT / "build/gpu-check").resolve(), deadline, dry,
                 profile, unit, notebooks)


if __name__ == "__main__":
    sys.exit(main())
