"""tests/nbcells.py runs a notebook's import and defining cells, and nothing else."""
import json

import pytest

import nbcells


def write(tmp_path, name, sources):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# T"}]
    cells += [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
               "source": s} for s in sources]
    (tmp_path / f"{name}.ipynb").write_text(json.dumps({"cells": cells}))


@pytest.fixture
def notebooks(tmp_path, monkeypatch):
    monkeypatch.setattr(nbcells, "NOTEBOOKS", tmp_path)
    write(tmp_path, "99-demo", [
        "%matplotlib inline\nimport math",
        "raise RuntimeError('a measurement: must not run')",
        "def area(r):\n    return math.pi * r * r",
        "SIDE = 3\nclass Box:\n    pass",
        "area(1)\nprint('a plot')",
    ])
    return tmp_path


def test_runs_imports_and_definitions_only(notebooks):
    ns = nbcells.notebook_namespace("99", ["area", "SIDE"])
    assert ns["area"](1.0) == pytest.approx(3.14159, rel=1e-5)
    assert ns["SIDE"] == 3 and "Box" in ns  # the whole defining cell runs


def test_names_no_cell_defines_are_reported(notebooks):
    with pytest.raises(KeyError, match="no cell defines \\['volume'\\]"):
        nbcells.notebook_namespace("99", ["area", "volume"])


def test_an_unknown_notebook_is_reported(notebooks):
    with pytest.raises(FileNotFoundError, match="starts with '42'"):
        nbcells.notebook_path("42")


def test_cell_source_finds_a_code_cell_by_id(tmp_path, monkeypatch):
    monkeypatch.setattr(nbcells, "NOTEBOOKS", tmp_path)
    cells = [{"cell_type": "markdown", "id": "md", "metadata": {}, "source": "# T"},
             {"cell_type": "code", "id": "abc", "metadata": {}, "outputs": [],
              "execution_count": None, "source": ["x = 1\n", "y = 2"]}]
    (tmp_path / "98-ids.ipynb").write_text(json.dumps({"cells": cells}))
    assert nbcells.cell_source("98", "abc") == "x = 1\ny = 2"
    for missing in ("md", "zz"):   # a Markdown cell is no code cell
        with pytest.raises(KeyError, match=f"no code cell with id '{missing}'"):
            nbcells.cell_source("98", missing)


def test_a_notebooks_plot_style_does_not_outlive_its_cells(tmp_path, monkeypatch):
    # A notebook's dx.use_slide_style() in one test must not resize another test's plots.
    import matplotlib
    monkeypatch.setattr(nbcells, "NOTEBOOKS", tmp_path)
    write(tmp_path, "98-style", ["import matplotlib\nmatplotlib.rcParams['font.size'] = 31.0"])
    before = matplotlib.rcParams["font.size"]
    nbcells.notebook_namespace("98", ["matplotlib"])
    assert matplotlib.rcParams["font.size"] == before != 31.0
