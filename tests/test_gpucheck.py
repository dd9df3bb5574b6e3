"""make gpu-check's harness (tools/gpucheck.py, tools/gpuprobes.py) and report's deadline."""
import gzip
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import nbformat
import psutil
import pytest
import torch

from tools import gpucheck as gc
from tools import gpuprobes as gp
from tools import report as rp

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_every_notebook_runs_in_exactly_one_lane():
    lanes = gc.plan(NOTEBOOKS)
    placed = [nb for _, paths in lanes for nb in paths]
    assert sorted(placed) == NOTEBOOKS and len(placed) == len(set(placed))
    assert [name for name, _ in lanes] == [name for name, _ in gc.LANES]


def test_a_new_notebook_joins_the_last_lane(tmp_path):
    paths = [tmp_path / n for n in ("00-a.ipynb", "09-b.ipynb", "10-new.ipynb")]
    lanes = dict(gc.plan(paths))
    assert lanes["09"] == [paths[1]] and lanes[gc.LANES[-1][0]] == [paths[0], paths[2]]
    assert "06-08" not in lanes  # a lane with no notebook is left out


def test_select_picks_notebooks_by_number_and_refuses_unknown_ones():
    assert gc.select(NOTEBOOKS, None) == NOTEBOOKS
    assert [nb.name[:2] for nb in gc.select(NOTEBOOKS, "03, 01")] == ["01", "03"]
    with pytest.raises(ValueError, match="no notebook numbered 1, 42; give two-digit"):
        gc.select(NOTEBOOKS, "1 42")


def test_pytest_result_reads_the_summary_line(tmp_path):
    log = tmp_path / "checks.log"
    assert gc.pytest_result(log) == "no log"
    log.write_text("$ pytest -m gpu\nssss\nSKIPPED [1] tests/x.py:3: needs a CUDA GPU\n"
                   "4 skipped, 1577 deselected in 7.00s\n$ pytest tests\n"
                   "FAILED tests/y.py::test_z - AssertionError\n"
                   "========== 1 failed, 9 passed in 3.1s ==========\n")
    assert gc.pytest_result(log, first=True) == "4 skipped, 1577 deselected in 7.00s"
    assert gc.pytest_result(log) == "1 failed, 9 passed in 3.1s"
    log.write_text("Traceback: collection crashed\n")
    assert gc.pytest_result(log).startswith("no summary line")


def test_a_lane_without_a_summary_reports_each_of_its_notebooks(tmp_path):
    lanes = [("09", [Path("09-x.ipynb")]), ("00-05", [Path("00-a.ipynb"), Path("01-b.ipynb")])]
    (tmp_path / "lane-00-05").mkdir()
    (tmp_path / "lane-00-05" / "summary.json").write_text(json.dumps({"notebooks": [
        {"notebook": "00-a", "seconds": 3.0, "records": [], "alarms": [], "error": None}]}))
    rows = {r["notebook"]: r for r in gc.notebook_rows(tmp_path, lanes, stopped=["09"])}
    assert rows["00-a"]["error"] is None and rows["00-a"]["lane"] == "00-05"
    assert "stopped after the deadline" in rows["09-x"]["error"]
    assert "without a summary" in rows["01-b"]["error"]


def _sleeper_lane(tmp_path, name):
    # A command that starts a child of its own, and a second command that must never start.
    marker = tmp_path / f"{name}-second-ran"
    return gc.Lane(name, [[sys.executable, "-c", "import subprocess, sys, time; "
                           "subprocess.Popen([sys.executable, '-c', 'import time; "
                           "time.sleep(60)']); time.sleep(60)"],
                          [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]],
                   tmp_path / f"{name}.log", dict(os.environ)), marker


def test_a_lane_past_its_time_is_stopped_with_everything_it_started(tmp_path):
    quick = gc.Lane("quick", [[sys.executable, "-c", "print('done')"]], tmp_path / "q.log",
                    dict(os.environ))
    slow, marker = _sleeper_lane(tmp_path, "slow")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    stopped = gc.run_lanes([quick, slow], until=time.time() + 3)
    assert stopped == ["slow"] and quick.returncodes == [0]
    assert "done" in (tmp_path / "q.log").read_text()
    assert not marker.exists(), "a stopped lane's next command started"
    time.sleep(0.5)
    left = [p for p in psutil.Process().children(recursive=True)
            if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"processes outlived the lane: {left}"


def _executed(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text="V1127 recompiling\n")]
    nb.cells = [cell]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def test_pack_writes_few_flat_files_and_keeps_stderr(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "logs").mkdir(parents=True)
    (work / "logs" / "lane-09.log").write_text("report: running\n")
    for lane, name in (("09", "09-c"), ("00-05", "00-a"), ("00-05", "01-b")):
        _executed(work / f"lane-{lane}" / "notebooks" / f"{name}.ipynb")
    (work / "probes").mkdir()
    (work / "probes" / "env.txt").write_text("torch 2.x\n")
    out.mkdir()
    gc.pack(out, work)
    files = sorted(p.name for p in out.iterdir())
    assert files == ["env.txt", "logs.tar.gz", "notebooks.tar.gz"]  # no trace: none was made
    assert all(p.is_file() for p in out.iterdir()) and len(files) <= 8
    with tarfile.open(out / "notebooks.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["notebooks/00-a.ipynb", "notebooks/01-b.ipynb",
                                          "notebooks/09-c.ipynb"]
    with tarfile.open(out / "logs.tar.gz") as tar:
        text = tar.extractfile("logs/00-a.stderr.txt").read().decode()
        assert "--- cell 0" in text and "recompiling" in text
        assert "logs/lane-09.log" in tar.getnames()


def test_the_summary_names_every_notebook_test_and_probe():
    summary = {"generated": "now", "dry": True, "profile": "ci", "deadline": 420.0,
               "seconds": 100.0, "hardware": None,
               "notebooks": [{"notebook": "00-a", "lane": "00-05", "seconds": 2.0, "error": None,
                              "records": [{"key": "k", "value": 1.5, "unit": "x", "note": "n"}]},
                             {"notebook": "09-b", "lane": "09", "seconds": 9.0, "records": [],
                              "error": "cell 3: AssertionError: a | b"}],
               "tests": {"returncode": 0, "result": "3 passed in 1s", "unit": None},
               "probes": [{"probe": "tf32", "line": "49 TFLOP/s", "seconds": 1.0}]}
    text = gc.render(summary)
    assert "| 00-a | 00-05 | ok | 2.0 | 1 |  |" in text
    assert "| 09-b | 09 | FAILED | 9.0 | 0 | cell 3: AssertionError: a \\| b |" in text
    assert "3 passed in 1s" in text and "**tf32**" in text and "| k | 1.5 | x | n |" in text


def test_without_a_gpu_it_stops_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("GPU_CHECK_DRY", raising=False)
    assert gc.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "GPU_CHECK_DRY=1" in err


@pytest.mark.parametrize("argv,env,message", [
    (["--deadline", "0"], {}, "--deadline must be a positive number"),
    (["--dry"], {"GPU_CHECK_PROFILE": "huge"}, "GPU_CHECK_PROFILE='huge': choose one of"),
    (["--dry"], {"GPU_CHECK_NOTEBOOKS": "7"}, "no notebook numbered 7")])
def test_bad_settings_are_refused_with_what_to_do(monkeypatch, capsys, argv, env, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    with pytest.raises(SystemExit) as exit_:
        gc.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_unit_setting_names_all_tests_or_some():
    assert gc.unit_tests("1") == ["tests"]
    assert gc.unit_tests("tests/a.py tests/b.py") == ["tests/a.py", "tests/b.py"]
    assert gc._unit(" 0 ") == "" and gc._unit(None) == "" and gc._unit("yes") == "yes"


# ---------------------------------------------------------------- probes

def test_a_failing_probe_is_reported_and_the_rest_go_on(capsys):
    def broken():
        raise RuntimeError("no kernel image is available")
    row = gp.run_probe("broken", broken)
    assert row["failed"] and "RuntimeError: no kernel image" in row["line"]
    assert gp.run_probe("fine", lambda: ("1 GB/s", {"x": 1}))["figures"] == {"x": 1}
    assert capsys.readouterr().out.splitlines()[-1] == "probe fine: 1 GB/s"


def test_the_training_trace_is_a_gzipped_chrome_trace(tmp_path, monkeypatch):
    monkeypatch.setattr(gp.dx, "default_device", lambda: torch.device("cpu"))
    line, figures = gp.training_trace(tmp_path / "trace.json.gz")
    events = json.loads(gzip.open(tmp_path / "trace.json.gz").read())["traceEvents"]
    assert any(e.get("cat") == "cpu_op" for e in events)
    assert figures["device"] == "cpu" and figures["wall_ms"] > 0 and "TinyGPT" in line
    assert not (tmp_path / "trace.json").exists()


def test_the_environment_file_names_the_versions(tmp_path):
    gp.environment(tmp_path / "env.txt")
    text = (tmp_path / "env.txt").read_text()
    assert f"torch {torch.__version__}" in text and "cuda available" in text


# ---------------------------------------------------------------- report's deadline

def test_report_starts_no_notebook_after_the_deadline(tmp_path):
    calls = []

    def execute(src, target, env, timeout, deadline=None):
        calls.append((src.stem, deadline))
        return None

    paths = [tmp_path / "a.ipynb", tmp_path / "b.ipynb"]
    for p in paths:
        nbformat.write(nbformat.v4.new_notebook(), p)
    past = time.time() - 1
    assert rp.report(paths, tmp_path / "out", execute=execute, deadline=past,
                     hardware=lambda: (None, None)) == 1
    assert calls == []
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    errors = [n["error"] for n in summary["notebooks"]]
    assert errors == ["not started: the deadline had passed"] * 2
    future = time.time() + 600
    assert rp.report(paths, tmp_path / "out", execute=execute, deadline=future,
                     hardware=lambda: (None, None)) == 0
    assert calls == [("a", future), ("b", future)]


def test_a_cell_running_at_the_deadline_is_interrupted(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print('started')"),
                nbformat.v4.new_code_cell("import time\ntime.sleep(120)"),
                nbformat.v4.new_code_cell("print('never')")]
    nbformat.write(nb, tmp_path / "nb.ipynb")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.time()
    error = rp.execute_notebook(tmp_path / "nb.ipynb", tmp_path / "out.ipynb", env,
                                cell_timeout=600, deadline=time.time() + 8)
    assert error == "cell 1: DeadlineExceeded: interrupted at the deadline"
    assert time.time() - start < 100, "the sleeping cell ran to its end"
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "started\n"
    assert executed.cells[2].outputs == []


def test_the_dry_run_of_one_notebook_writes_its_files(tmp_path):
    # The whole harness on this CPU, for notebook 00 only: what `make gpu-check GPU_CHECK_DRY=1`
    # does for all ten (about 5 minutes on two cores).
    env = {**os.environ, "GPU_CHECK_NOTEBOOKS": "00", "GPU_CHECK_DRY": "1",
           "GPU_CHECK_OUT": str(tmp_path / "out")}
    env.pop("GPU_CHECK_UNIT", None)
    run = subprocess.run([sys.executable, "-m", "tools.gpucheck"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == sorted(gc.OUT_FILES)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [nb["notebook"] for nb in summary["notebooks"]] == ["00-performance-model"]
    assert summary["notebooks"][0]["records"] and summary["failed"] == []
    assert "dry run" in (tmp_path / "out" / "summary.md").read_text()
