"""make report's summary (tools/report.py): records grouped by notebook, failures, hardware."""
import json
import os
import sys

import nbformat
import pytest

from tools import report as rp

GiB = 1024 ** 3
HARDWARE = {"cpu": "Fake CPU", "cores": 4, "logical_cores": 8, "torch_threads": 4,
            "ram_total": 16 * GiB, "ram_available": 12 * GiB, "torch": "2.6.0+cu124",
            "cuda_build": "12.4", "profile": "class",
            "accelerators": [{"device": "cuda:0", "name": "Fake GPU", "memory": 24 * GiB,
                              "free": 20 * GiB, "capability": "8.9"}]}


def with_checkout() -> str:
    """PYTHONPATH with this checkout first, as make sets it: the kernel may live on the rest."""
    return os.pathsep.join(filter(None, [str(rp.ROOT), os.environ.get("PYTHONPATH")]))


def write_records(directory, rows):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "records.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({"note": "", "time": 0.0, **row}) + "\n")


def test_summary_of_a_fake_records_file(tmp_path):
    import d2l_extras as dx
    write_records(tmp_path, [
        {"key": "fusion_speedup", "value": 6.91234, "unit": "x", "note": "compiled vs eager",
         "notebook": "01-compilers"},
        {"key": "busbw", "value": 11.5, "unit": "GB/s", "note": "ring | 64 MB",
         "notebook": "08-parameter-servers"},
        {"key": "compile_ratio", "value": 0.5, "unit": "x", "notebook": "01-compilers"},
        {"key": "stray", "value": 1, "unit": "s", "notebook": ""}])
    runs = [{"notebook": "01-compilers", "seconds": 12.34, "error": None, "alarms": []},
            {"notebook": "04-hardware", "seconds": 3.0, "error": "cell 5: ValueError: boom",
             "alarms": [(7, "cuda-home", "No CUDA runtime is found, using CUDA_HOME='/x'")]},
            {"notebook": "08-parameter-servers", "seconds": 20.0, "error": None, "alarms": []}]
    summary = rp.summarize(runs, dx.report.read_records(tmp_path), HARDWARE, profile="class")
    by_name = {nb["notebook"]: nb for nb in summary["notebooks"]}
    assert [r["key"] for r in by_name["01-compilers"]["records"]] == ["fusion_speedup",
                                                                      "compile_ratio"]
    assert by_name["04-hardware"]["records"] == [] and summary["failed"] == ["04-hardware"]
    assert list(summary["other_records"]) == [""] and summary["total_seconds"] == 35.3
    json.dumps(summary)  # the JSON summary is plain data

    md = rp.render_markdown(summary)
    assert md.index("## Hardware") < md.index("## Notebooks") < md.index("## 01-compilers")
    assert "| cuda:0 | Fake GPU, 24.0 GiB (20.0 GiB free), compute capability 8.9 |" in md
    assert "| 01-compilers | ok | 12.3 s | 2 | 0 |" in md
    assert "| 04-hardware | FAILED | 3.0 s | 0 | 1 |" in md
    assert "| fusion_speedup | 6.912 | x | compiled vs eager |" in md
    assert "ring \\| 64 MB" in md  # a | in a note does not break the table
    assert "**Failed** after 3.0 s: cell 5: ValueError: boom" in md
    assert "alarm line in cell 7 (cuda-home)" in md
    assert "Failed: 04-hardware." in md and "## (no notebook named)" in md


def test_hardware_without_a_gpu_and_with_a_failed_check():
    lines = "\n".join(rp.render_hardware({**HARDWARE, "accelerators": [], "cuda_build": None},
                                         error="D2L_EXPECT_GPU=1 says ..."))
    assert "| GPU | none visible |" in lines and "CPU build" in lines
    assert lines.startswith("**Hardware check failed:** D2L_EXPECT_GPU=1")


def fake_notebooks(tmp_path, names):
    paths = []
    for name in names:
        path = tmp_path / "src" / f"{name}.ipynb"
        path.parent.mkdir(exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(), path)
        paths.append(path)
    return paths


def test_report_writes_the_summary_and_fails_when_a_notebook_failed(tmp_path, monkeypatch):
    import d2l_extras as dx
    out = tmp_path / "out"
    write_records(out, [{"key": "old", "value": 1, "unit": "s", "notebook": "a"}])  # last run

    def execute(source, target, env, cell_timeout):
        assert env["D2L_REPORT_DIR"] == str(out.resolve())
        assert env["D2L_REPORT_NOTEBOOK"] == source.stem and cell_timeout == 60
        for name in ("D2L_REPORT_DIR", "D2L_REPORT_NOTEBOOK"):  # what the kernel would see
            monkeypatch.setenv(name, env[name])
        dx.record(f"{source.stem}_speed", 2.0, "GB/s", "fake")
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.read(source, as_version=4), target)
        return "cell 1: RuntimeError: broken" if source.stem == "b" else None

    code = rp.report(fake_notebooks(tmp_path, ["a", "b"]), out, cell_timeout=60,
                     execute=execute, hardware=lambda: (HARDWARE, None))
    assert code == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed"] == ["b"]
    assert [r["key"] for nb in summary["notebooks"] for r in nb["records"]] == ["a_speed",
                                                                                "b_speed"]
    assert (out / "notebooks" / "a.ipynb").exists() and "## b" in (out / "summary.md").read_text()


def test_report_succeeds_when_every_notebook_ran(tmp_path):
    def execute(source, target, env, cell_timeout):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.read_text())
        return None

    assert rp.report(fake_notebooks(tmp_path, ["a"]), tmp_path / "out", execute=execute,
                     hardware=lambda: (HARDWARE, None)) == 0
    assert rp.report(fake_notebooks(tmp_path, ["a"]), tmp_path / "out", execute=execute,
                     hardware=lambda: (None, "no GPU")) == 1  # D2L_EXPECT_GPU=1, none found
    load = json.loads((tmp_path / "out" / "summary.json").read_text())["machine_load"]
    assert load["cores"] == os.cpu_count() and load["others_cores"] >= 0
    assert "machine load:" in (tmp_path / "out" / "summary.md").read_text()


def test_machine_load_is_what_other_processes_used_per_second_of_the_run():
    assert rp.machine_load(30.0, 60.0, cores=2) == {"others_cores": 0.5, "cores": 2,
                                                    "busy": True}
    assert rp.machine_load(10.0, 100.0, cores=8)["busy"] is False   # 0.1 of 8 cores
    assert rp.machine_load(-1.0, 10.0, cores=2)["others_cores"] == 0.0   # rounding of counters
    with pytest.raises(ValueError, match="seconds must be positive"):
        rp.machine_load(1.0, 0.0)
    quiet = rp.describe_load({"others_cores": 0.1, "cores": 8, "busy": False})
    assert quiet == ("machine load: other processes kept 0.1 of 8 cores busy while the "
                     "notebooks ran (quiet)")
    busy = rp.describe_load({"others_cores": 1.9, "cores": 2, "busy": True})
    assert busy.startswith("warning:") and "rebuild on a quiet machine" in busy
    assert "not measured" in rp.describe_load(None)


def test_a_real_kernel_of_this_python_records_and_saves(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import sys, d2l_extras as dx\nprint(sys.executable)"),
                nbformat.v4.new_code_cell("dx.record('answer', 42, 'units', 'from a kernel')"),
                nbformat.v4.new_code_cell("1 / 0")]
    src = tmp_path / "nb.ipynb"
    nbformat.write(nb, src)
    env = {**os.environ, "D2L_REPORT_DIR": str(tmp_path / "rec"),
           "D2L_REPORT_NOTEBOOK": "nb"}
    env["PYTHONPATH"] = with_checkout()  # d2l_extras from this checkout, as under make
    error = rp.execute_notebook(src, tmp_path / "out" / "nb.ipynb", env, cell_timeout=120)
    assert error == "cell 2: ZeroDivisionError: division by zero"
    executed = nbformat.read(tmp_path / "out" / "nb.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"].strip() == sys.executable
    import d2l_extras as dx
    [row] = dx.report.read_records(tmp_path / "rec")
    assert (row["key"], row["value"], row["notebook"]) == ("answer", 42.0, "nb")


def test_a_notebooks_records_run_after_its_last_cell_and_stay_out_of_the_copy(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import d2l_extras as dx\nx = 42")]
    src = tmp_path / "nb.ipynb"
    nbformat.write(nb, src)
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "nb.py").write_text("dx.record('answer', x, 'units')\n1 / 0\n")
    env = {**os.environ, "D2L_REPORT_DIR": str(tmp_path / "rec"), "D2L_REPORT_NOTEBOOK": "nb",
           "PYTHONPATH": with_checkout()}
    error = rp.execute_notebook(src, tmp_path / "out" / "nb.ipynb", env, cell_timeout=120)
    assert error == "records/nb.py: ZeroDivisionError: division by zero"
    assert len(nbformat.read(tmp_path / "out" / "nb.ipynb", as_version=4).cells) == 1
    import d2l_extras as dx
    assert [r["value"] for r in dx.report.read_records(tmp_path / "rec")] == [42.0]


def test_main_refuses_a_missing_notebook(tmp_path):
    with pytest.raises(SystemExit):
        rp.main([str(tmp_path / "nope.ipynb"), "--out", str(tmp_path)])
