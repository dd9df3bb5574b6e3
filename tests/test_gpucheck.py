"""make gpu-check's harness (tools/gpucheck.py) and tools.report's deadline."""
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import nbformat
import psutil
import pytest
import torch

from tools import gpucheck as gc
from tools import report as rp

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_every_notebook_runs_in_exactly_one_lane():
    lanes = gc.plan(NOTEBOOKS)
    placed = [nb for paths in lanes.values() for nb in paths]
    assert sorted(placed) == NOTEBOOKS and len(placed) == len(set(placed))
    assert list(lanes) == list(gc.LANES)


def test_a_new_notebook_joins_the_last_lane(tmp_path):
    paths = [tmp_path / n for n in ("00-a.ipynb", "09-b.ipynb", "10-new.ipynb")]
    lanes = gc.plan(paths)
    assert lanes == {"09": [paths[1]], "00-05": [paths[0], paths[2]]}  # no lane without notebooks


def test_select_picks_notebooks_by_number_and_refuses_unknown_ones():
    assert gc.select(NOTEBOOKS, "") == NOTEBOOKS
    assert [nb.name[:2] for nb in gc.select(NOTEBOOKS, "03, 01")] == ["01", "03"]
    with pytest.raises(ValueError, match="no notebook numbered 1, 42; give two-digit"):
        gc.select(NOTEBOOKS, "1 42")


def test_junit_gives_counts_failed_tests_and_probe_lines(tmp_path):
    (tmp_path / "test_x.py").write_text(textwrap.dedent("""
        import pytest
        def test_probe(record_property):
            record_property("probe", "1.5 GB/s")
        def test_fails():
            assert False
        @pytest.mark.skip(reason="needs a CUDA GPU")
        def test_skips():
            pass
    """))
    xml = tmp_path / "out.xml"
    subprocess.run([sys.executable, "-m", *gc.PYTEST, "-W", "error", f"--junitxml={xml}",
                    "test_x.py"], cwd=tmp_path, capture_output=True, timeout=120)
    assert gc.junit(xml) == {"counts": {"passed": 1, "failure": 1, "skipped": 1},
                             "failed": ["test_fails"], "probes": ["test_probe: 1.5 GB/s"]}
    assert gc.junit(tmp_path / "none.xml") == {"counts": {}, "failed": [], "probes": []}


def test_a_lane_without_a_summary_reports_each_of_its_notebooks(tmp_path):
    lanes = {"09": [Path("09-x.ipynb")], "00-05": [Path("00-a.ipynb"), Path("01-b.ipynb")]}
    (tmp_path / "lane-00-05").mkdir()
    (tmp_path / "lane-00-05" / "summary.json").write_text(json.dumps({"notebooks": [
        {"notebook": "00-a", "seconds": 3.0, "records": [], "alarms": [], "error": None}]}))
    rows = {r["notebook"]: r for r in gc.notebook_rows(tmp_path, lanes, stopped=["lane-09"])}
    assert rows["00-a"]["error"] is None and rows["00-a"]["lane"] == "00-05"
    assert "stopped after the deadline" in rows["09-x"]["error"]
    assert "without a summary" in rows["01-b"]["error"]


def test_a_lane_past_its_time_is_killed_with_everything_it_started(tmp_path):
    # The slow lane's first command starts a child in a session of its own, as a kernel is; its
    # second command must never start.
    sleeper = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; "
               "time.sleep(60)'], start_new_session=True); time.sleep(60)")
    marker = tmp_path / "second-ran"
    lanes = {"quick": [[sys.executable, "-c", "print('done')"]],
             "slow": [[sys.executable, "-c", sleeper],
                      [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]]}
    before = {p.pid for p in psutil.process_iter()}
    assert gc.run_lanes(lanes, tmp_path, dict(os.environ), until=time.time() + 3) == ["slow"]
    assert "done" in (tmp_path / "quick.log").read_text()
    assert "time.sleep(60)" in (tmp_path / "slow.log").read_text()  # sh -x named the command
    time.sleep(0.5)
    assert not marker.exists(), "a killed lane's next command started"
    left = [p for p in psutil.process_iter(["cmdline"]) if p.pid not in before
            and "time.sleep(60)" in " ".join(p.info["cmdline"] or [])]
    assert left == [], f"processes outlived the lane: {left}"


def test_pack_keeps_the_notebooks_and_each_ones_stderr(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "logs").mkdir(parents=True)
    (work / "logs" / "lane-09.log").write_text("report: running\n")
    for lane, name in (("09", "09-c"), ("00-05", "00-a")):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
        nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stderr",
                                                      text="V1127 recompiling\n")]
        (work / f"lane-{lane}" / "notebooks").mkdir(parents=True)
        nbformat.write(nb, work / f"lane-{lane}" / "notebooks" / f"{name}.ipynb")
    out.mkdir()
    gc.pack(out, work)
    assert sorted(p.name for p in out.iterdir()) == ["logs.tar.gz", "notebooks.tar.gz"]
    with tarfile.open(out / "notebooks.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["notebooks/00-a.ipynb", "notebooks/09-c.ipynb"]
    with tarfile.open(out / "logs.tar.gz") as tar:
        text = tar.extractfile("logs/00-a.stderr.txt").read().decode()
        assert "--- cell 0" in text and "recompiling" in text
        assert "logs/lane-09.log" in tar.getnames()


def test_the_summary_names_every_notebook_test_and_probe():
    rows = [{"notebook": "00-a", "lane": "00-05", "seconds": 2.0, "error": None,
             "records": [{"key": "k", "value": 1.5, "unit": "x", "note": "n"}]},
            {"notebook": "09-b", "lane": "09", "seconds": 9.0, "records": [],
             "error": "the lane was stopped after the deadline's grace"}]
    summary = rp.summarize(rows, [], None) | {
        "dry": True, "deadline": 420.0, "seconds": 480.0, "stopped": ["lane-09"],
        "lanes": {"09": ["09-b"], "00-05": ["00-a"]},
        "tests": {"pytest -m gpu tests": {"counts": {"passed": 3, "failure": 1},
                                          "failed": ["test_peers"], "probes": ["test_tf32: 49"]}}}
    status, text = gc.render(summary)
    assert status in text and text.startswith("# make gpu-check (dry run: CUDA hidden)")
    assert "3 passed, 1 failure" in status and "- FAILED test_peers" in status
    assert "test_tf32: 49" in status and "killed at the deadline's grace: lane-09" in status
    assert "| 09-b | FAILED |" in text and "stopped after the deadline's grace" in text


def test_without_a_gpu_it_stops_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("GPU_CHECK_DRY", raising=False)
    assert gc.main() == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "GPU_CHECK_DRY=1" in err


@pytest.mark.parametrize("env,message", [
    ({"GPU_CHECK_DEADLINE": "0"}, "GPU_CHECK_DEADLINE=0: give a positive number of seconds"),
    ({"GPU_CHECK_PROFILE": "huge"}, "GPU_CHECK_PROFILE='huge': choose one of"),
    ({"GPU_CHECK_NOTEBOOKS": "7"}, "no notebook numbered 7")])
def test_bad_settings_are_refused_with_what_to_do(monkeypatch, capsys, env, message):
    monkeypatch.setenv("GPU_CHECK_DRY", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert gc.main() == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("unit,tests", [("1", ["tests"]), ("0", []), ("", []),
                                        ("tests/a.py tests/b.py", ["tests/a.py", "tests/b.py"])])
def test_settings_reach_the_check(monkeypatch, tmp_path, unit, tests):
    calls = []
    monkeypatch.setattr(gc, "check", lambda *args: calls.append(args) or 0)
    for key, value in {"GPU_CHECK_DRY": "yes", "GPU_CHECK_UNIT": unit, "GPU_CHECK_DEADLINE": "30",
                       "GPU_CHECK_OUT": str(tmp_path), "GPU_CHECK_NOTEBOOKS": "01",
                       "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GPU_CHECK_PROFILE", raising=False)
    assert gc.main() == 0
    out, deadline, dry, profile, unit_tests, notebooks = calls[0]
    assert (out, deadline, dry, profile, unit_tests) == (tmp_path, 30.0, True, "ci", tests)
    assert [nb.name[:2] for nb in notebooks] == ["01"]


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
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(gc.OUT_FILES)
    summary = json.loads((out / "summary.json").read_text())
    assert [nb["notebook"] for nb in summary["notebooks"]] == ["00-performance-model"]
    assert summary["notebooks"][0]["records"] and summary["failed"] == []
    assert any("test_training_trace: one TinyGPT step" in p
               for p in summary["tests"]["pytest -m gpu tests"]["probes"])
    assert "dry run" in (out / "summary.md").read_text()
    env_txt = (out / "env.txt").read_text()
    assert f"torch {torch.__version__}" in env_txt  # the version line, whatever collect_env does
    assert "Is CUDA available: False" in env_txt  # torch's collect_env
