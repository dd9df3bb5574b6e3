"""make readings (tools/readings.py): the words of a reading, numbers masked, compared across runs."""
import json

import pytest

from tools import readings as rd


@pytest.mark.parametrize("a, b", [
    ("compiled: 0.59x (0.55-0.63x): slower", "compiled: 1.42x (1.31-1.55x): slower"),
    ("copy: 22.0 GB/s (12.2 ms ±7%), so 12.2 ms", "copy: 9.5 GB/s (980 us ±<1%), so 3 s"),
    ("n =    16:  2.71 us per product", "n = 16: 2.6 us per product"),
    ("each process computes in x1.03 its time alone",
     "each process computes in x1.57 its time alone"),
    ("2 processes: 5.5 s, start-up included", "4 processes: 10.1 s, start-up included"),
    ("at 0x7f2121632390", "at 0x55aa"),
    ("  aten::copy_   1.17%   49.203us   1.17%   49.203us   4.100us   12",
     "  aten::clamp_min   0.93%   39.128us   0.93%   39.128us   19.564us   2"),
    ("        aten::pow: 4 calls, self 164 us", "  aten::clamp_min: 2 calls, self 44.5 us"),
])
def test_numbers_and_their_units_are_masked(a, b):
    assert rd.mask(a) == rd.mask(b)


@pytest.mark.parametrize("a, b", [
    ("compiled: 0.59x (0.55-0.63x): slower", "compiled: 1.03x (0.95-1.10x): within noise"),
    ("add: 11.7 ms ±7%, as predicted", "add: 20.1 ms ±3%, 1.71x the prediction"),
    ("regime: compute-bound", "regime: mixed, compute-bound and memory-bound"),
    ("top operator: aten::mm", "top operator: aten::addmm"),   # not a table's row
])
def test_words_are_not_masked(a, b):
    assert rd.mask(a) != rd.mask(b)


def notebook(tmp_path, name, outputs):
    """An executed notebook whose code cells printed `outputs` (one list of items each)."""
    cells = [{"cell_type": "markdown", "source": "# t", "metadata": {}}]
    for items in outputs:
        cells.append({"cell_type": "code", "source": "", "metadata": {}, "outputs": items})
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


def out(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def test_cell_lines_take_stdout_and_text_results_not_plots_or_stderr():
    cell = {"outputs": [out("a 1.0\n\n"), out("warning\n", "stderr"),
                        {"output_type": "execute_result", "data": {"text/plain": "table 2"}},
                        {"output_type": "display_data",
                         "data": {"image/png": "...", "text/plain": "<Figure>"}}]}
    assert rd.cell_lines(cell) == ["a 1.0", "table 2"]


def test_compare_lists_the_cells_whose_words_changed(tmp_path):
    for run, (verdict, ms) in enumerate([("faster", 12.5), ("faster", 9.1),
                                         ("within noise", 12.0)], 1):
        notebook(tmp_path / f"run-{run}", "01.ipynb",
                 [[out(f"took {ms} ms\n")], [out(f"compiled: {verdict}\n")]])
    report, changed = rd.compare([tmp_path / f"run-{r}" for r in (1, 2, 3)])
    assert changed == 1
    assert report[0] == "01.ipynb cell 2: 2 variants"
    assert report[1:] == ["  [1] compiled: faster", "  [2] compiled: within noise"]
    same, none = rd.compare([tmp_path / "run-1", tmp_path / "run-2"])
    assert none == 0 and same == []


def test_compare_says_which_folder_lacks_a_notebook(tmp_path):
    notebook(tmp_path / "a", "00.ipynb", [[out("x\n")]])
    (tmp_path / "b").mkdir()
    report, changed = rd.compare([tmp_path / "a", tmp_path / "b"])
    assert changed == 0 and report == [f"00.ipynb: not in {tmp_path / 'b'}"]


def test_budget_lines_flag_the_slow_notebooks():
    lines = rd.budget_lines({"00-model.ipynb": [12.0, 61.5], "09-capstone.ipynb": [85.0]},
                            "class")
    assert lines[0].endswith("OVER the 60 s budget") and "OVER" not in lines[1]
    assert "OVER" not in rd.budget_lines({"00-model.ipynb": [100.0]}, "full")[0]


def test_bad_arguments_are_refused(capsys):
    from tools import report
    with pytest.raises(SystemExit):
        report.main(["--runs", "0"])
    assert "--runs must be 1 or more" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rd.main(["only-one"])
    assert "two or more folders" in capsys.readouterr().err


def test_report_runs_then_compares_the_readings(tmp_path, monkeypatch, capsys):
    from tools import report
    said = iter(["faster", "within noise"])

    def fake_report(paths, folder, *args, **kwargs):  # one run: its executed copy and summary
        notebook(folder / "notebooks", "00.ipynb", [[out(next(said) + "\n")]])
        (folder / "summary.json").write_text(json.dumps({"profile": "class", "notebooks": [
            {"notebook": "00", "seconds": 61.0, "error": None}]}))
        return 0
    monkeypatch.setattr(report, "report", fake_report)
    first = sorted(report.NOTEBOOKS.glob("*.ipynb"))[0]
    assert report.main(["--runs", "2", "--out", str(tmp_path), str(first)]) == 1
    printed = capsys.readouterr().out
    assert "00: 61.0, 61.0 s  OVER the 60 s budget" in printed
    assert "00.ipynb cell 1: 2 variants" in printed and "[2] within noise" in printed
