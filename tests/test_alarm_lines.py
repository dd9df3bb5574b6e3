"""Alarm lines (tools/alarms.py) are found in cell outputs, and nbval fails the cell that prints one."""
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from nbval_plugin import explain, kernel_env, worker_scope
from tools.alarms import ALARM_PATTERNS, alarm_lines

ROOT = Path(__file__).parents[1]

# Lines as they were printed on this project's CPU machine (torch 2.14.1, CUDA build).
SEEN = {
    "profiler-gpu-count": "ERROR:2026-11-22 05:41:18 10573:10573 DeviceProperties.cpp:56] "
                          "gpuGetDeviceCount failed with code 35",
    "profiler-usdt": "USDT:2026-11-22 05:41:18 10573:10573 SyncActivityProfilerHandler.cpp:39] "
                     "profiler_start",
    "cuda-home": "No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'",
    "error-line": "ERROR:root:something went wrong",
    "exercise-check": "Exercise 2: not yet: count the bytes read and written",
}


def stream(text, name="stderr"):
    return {"output_type": "stream", "name": name, "text": text}


def test_every_pattern_has_a_seen_example_and_a_reason():
    assert {name for name, _, _ in ALARM_PATTERNS} == set(SEEN)
    assert all(reason for _, _, reason in ALARM_PATTERNS)


@pytest.mark.parametrize("name", sorted(SEEN))
def test_each_seen_line_is_found_under_its_own_name(name):
    outputs = [stream("first line\n" + SEEN[name] + "\nlast line\n")]
    assert alarm_lines(outputs) == [(name, SEEN[name])]


def test_stdout_stderr_and_displayed_text_are_all_scanned():
    outputs = [stream(SEEN["profiler-usdt"] + "\n", "stdout"),
               {"output_type": "display_data", "data": {"text/plain": SEEN["cuda-home"]}},
               stream([SEEN["profiler-gpu-count"], "\n"])]  # stored notebooks split text in lists
    assert [n for n, _ in alarm_lines(outputs)] == ["profiler-usdt", "cuda-home",
                                                    "profiler-gpu-count"]


@pytest.mark.parametrize("text", [
    "compiled 2.3x faster than eager",
    "E1122 05:40:00.123 140 api.py:869] failed (exitcode: 1)",  # torchrun, shown on purpose
    "[rank1]: ValueError: failed on purpose",
    "no ERROR here, and CUDA_HOME is only a word",
    "",
])
def test_ordinary_output_is_not_an_alarm(text):
    assert alarm_lines([stream(text), {"output_type": "display_data", "data": {"image/png": "x"}}]) \
        == []


def test_explain_gives_each_line_its_reason():
    message = explain(alarm_lines([stream(SEEN["cuda-home"])]))
    assert SEEN["cuda-home"] in message and "cpp_extension" in message


def test_the_kernel_is_started_without_pytests_marker():
    env = kernel_env({"PATH": "/bin", "PYTEST_CURRENT_TEST": "x.ipynb::Cell 0 (call)"})
    assert env == {"PATH": "/bin"}


def test_nbval_fails_exactly_the_cells_that_print_alarm_lines(tmp_path):
    # A real kernel under nbval, as in `make test`: a Python print to stderr, a C-level write
    # to file descriptor 2 (how the profiler prints), and clean cells around them.
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print('fine')"),
                nbformat.v4.new_code_cell(f"import sys; print({SEEN['cuda-home']!r}, file=sys.stderr)"),
                nbformat.v4.new_code_cell("import os, time\n"
                                          f"os.write(2, {(SEEN['profiler-usdt'] + chr(10)).encode()!r})\n"
                                          "time.sleep(0.2); print('after')"),
                nbformat.v4.new_code_cell("print('clean again')")]
    nbformat.write(nb, tmp_path / "alarms.ipynb")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"),
                                         os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "alarms.ipynb", "--nbval-lax",
                          "--nbval-current-env", "-p", "nbval_plugin", "-p",
                          "no:cacheprovider", "-q", "-rf", "--rootdir", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "2 failed, 2 passed" in out, out
    assert "alarms.ipynb::Cell 1" in out and "alarms.ipynb::Cell 2" in out, out
    assert "profiler_start" in out and "CUDA_HOME" in out, out


def test_nbval_keeps_each_notebook_it_ran_cleanly_for_the_decks(tmp_path):
    good, bad = nbformat.v4.new_notebook(), nbformat.v4.new_notebook()
    good.cells = [nbformat.v4.new_markdown_cell("# A"), nbformat.v4.new_code_cell("print('one')"),
                  nbformat.v4.new_code_cell("print('two')"), nbformat.v4.new_code_cell("1 + 1;"),
                  nbformat.v4.new_code_cell("from IPython.display import clear_output\n"
                                            "print('old'); clear_output(wait=True)\n"
                                            "print('new')")]
    bad.cells = [nbformat.v4.new_code_cell("1 / 0")]
    nbformat.write(good, tmp_path / "good.ipynb")
    nbformat.write(bad, tmp_path / "bad.ipynb")
    # Collected after the notebooks, as tests/ after notebooks/ in `make test`.
    (tmp_path / "test_later.py").write_text(
        "import json, pathlib\nimport nbval_plugin\n"
        "def test_later():\n"
        "    here = pathlib.Path(__file__).parent\n"
        "    assert nbval_plugin.executed_folder([here / 'bad.ipynb']) is None\n"
        "    folder = nbval_plugin.executed_folder([here / 'good.ipynb'])\n"
        "    (here / 'seen.json').write_text(json.dumps([str(folder), json.loads(\n"
        "        (folder / 'good.ipynb').read_text())['cells']]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"),
                                         os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "good.ipynb", "bad.ipynb", "test_later.py",
                          "--nbval-lax", "--nbval-current-env", "-p", "nbval_plugin", "-p",
                          "no:cacheprovider", "-q", "--rootdir", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert "1 failed, 5 passed" in out, out
    folder, cells = json.loads((tmp_path / "seen.json").read_text())
    assert ["".join(c["outputs"][0]["text"]) for c in cells[1:3]] == ["one\n", "two\n"]
    assert cells[3]["outputs"] == [], "a trailing ';' hides the value, as in Jupyter"
    assert [o["text"] for o in cells[4]["outputs"]] == [["new\n"]], "clear_output, as in Jupyter"
    assert cells[0]["cell_type"] == "markdown" and not Path(folder).exists(), "removed at the end"


def test_xdist_workers_keep_their_runs_in_the_controllers_folder(tmp_path, monkeypatch):
    import nbval_plugin as plugin
    for name in ("_FOLDER", "_OWNED"):
        monkeypatch.setattr(plugin, name, [])
    monkeypatch.delenv(plugin.RUNS_ENV, raising=False)
    controller, worker = object(), type("Config", (), {"workerinput": {}})()
    plugin.pytest_configure(controller)  # makes the folder; workers inherit RUNS_ENV
    folder = Path(os.environ[plugin.RUNS_ENV])
    plugin._FOLDER.clear()
    plugin.pytest_configure(worker)
    assert plugin._FOLDER == [folder] and plugin._OWNED == [folder]
    (folder / "a.ipynb").write_text("{}")  # what the other worker kept
    assert plugin.executed_folder([Path("notebooks/a.ipynb")]) == folder
    assert plugin.executed_folder([Path("notebooks/b.ipynb")]) is None
    plugin.pytest_unconfigure(controller)
    assert not folder.exists() and plugin.RUNS_ENV not in os.environ


@pytest.mark.parametrize("nodeid, scope", [
    ("notebooks/04-hardware.ipynb::Cell 3", "notebooks"),
    ("notebooks/04-hardware.ipynb::Cell records", "notebooks"),
    ("tests/test_decks.py::test_every_slide_fits[00]", "notebooks"),
    ("tests/test_lessons.py::test_at_most_one_line_says_what_was_skipped[00]", "notebooks"),
    ("tests/test_hosted.py::test_a_lone_notebook_runs_on_a_hosted_stack",
     "tests/test_hosted.py::test_a_lone_notebook_runs_on_a_hosted_stack"),
    ("tests/test_hosted.py::test_setup_cell_fits_six_lines_of_a_slide",
     "tests/test_hosted.py::test_setup_cell_fits_six_lines_of_a_slide"),
    ("tests/test_ring.py::test_ring[2]", "tests/test_ring.py::test_ring[2]")])
def test_xdist_keeps_the_notebooks_and_their_readers_on_one_worker(nodeid, scope):
    # The decks reuse nbval's runs, which live in one worker's memory.
    assert worker_scope(nodeid) == scope


def test_work_is_handed_out_lone_notebook_first_then_notebooks_then_the_longest_test():
    from nbval_plugin import LONE_NOTEBOOK, LONGEST_FIRST, pytest_collection_modifyitems

    def item(nodeid):
        return type("Item", (), {"nodeid": nodeid})()
    ids = ["tests/test_a.py::t", LONGEST_FIRST + "[06-x.ipynb]", "notebooks/01-x.ipynb::Cell 0",
           "notebooks/01-x.ipynb::Cell 1", f"notebooks/{LONE_NOTEBOOK}::Cell 0",
           f"notebooks/{LONE_NOTEBOOK}::Cell 1", "tests/test_z.py::t"]
    items = [item(i) for i in ids]
    pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == [ids[4], ids[5], ids[2], ids[3], ids[1], ids[0], ids[6]]
