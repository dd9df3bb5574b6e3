"""Notebooks are stored without outputs or execution counts, without shell escapes, and with the
project's kernel and slide metadata (tools/nbmeta.py sets both)."""
import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no .ipynb files"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_clean(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert not cell.get("outputs"), f"{path.name} cell {i} is stored with outputs"
        assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"
        source = "".join(cell["source"])
        # `!cmd` and `%%bash` break on Windows; use Python (subprocess, pathlib) instead.
        assert not re.search(r"^\s*!", source, re.M), f"{path.name} cell {i} has a '!' shell escape"
        assert not re.search(r"^\s*%%?(bash|sh|system)\b", source, re.M), \
            f"{path.name} cell {i} runs a shell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_output_is_hardware_report(path):
    # The set-up cell (tools/hosted.py) comes first; it prints only when it installs something.
    nb = json.loads(path.read_text(encoding="utf-8"))
    setup, first_code = [c for c in nb["cells"] if c["cell_type"] == "code"][:2]
    assert "setup" in setup["metadata"].get("tags", []), f"{path.name}: no set-up cell first"
    assert "hardware_report(" in "".join(first_code["source"]), \
        f"{path.name}: the first code cell after the set-up should show dx.hardware_report()"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_kernel_is_the_project_kernel(path):
    # The generic python3, which every hosted platform knows; Jupyter started from .venv or an
    # activated environment runs that environment's Python under this name.
    from tools.nbmeta import KERNELSPEC
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["metadata"].get("kernelspec") == KERNELSPEC, \
        f"{path.name} names another kernel; run: python tools/nbmeta.py notebooks/{path.name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_slide_metadata_is_up_to_date(path):
    # The decks (make slides, RISE in make lab) are cut from this metadata: a new section or a
    # grown cell needs the tool rerun, or the slides drift from the notebook.
    from tools.nbmeta import rewrite, slide_types
    text = path.read_text(encoding="utf-8")
    cells = json.loads(text)["cells"]
    stale = [f"cell {i}: {cell['metadata'].get('slideshow', {}).get('slide_type')!r} "
             f"should be {kind!r}" for i, (cell, kind) in enumerate(zip(cells, slide_types(cells)))
             if cell["metadata"].get("slideshow") != {"slide_type": kind}]
    assert not stale, (f"{path.name}: slide metadata out of date ({'; '.join(stale[:5])}); "
                       f"run: python tools/nbmeta.py notebooks/{path.name}")
    assert rewrite(text) == text, f"run: python tools/nbmeta.py notebooks/{path.name}"
