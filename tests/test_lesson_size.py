"""The lesson is the code (issue 45): short teaching cells and a small `dx` vocabulary.

A teaching cell is a code cell a slide shows: not the set-up, not a worked solution, not an
exercise check. Teaching cells hold at most 15 lines each, most of them 8 or fewer; the
notebooks hold at most 1,950 such lines in all. Cells tagged `no-slide` are set-up (imports,
notices): they define nothing, so no lesson code hides from the slides there. The notebooks call
at most 40 hand-written `dx` names, the ones in VOCABULARY, besides what the notebooks save
(`#@save`, tools/save.py), and define no function or class that a `dx` name already means (06's
`compare` beside `dx.compare`) unless the cell is that name's source.
"""
import ast
import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from tools.nbmeta import hidden, is_check, is_solution  # noqa: E402
from tools.save import public_names, saved_blocks  # noqa: E402

import d2l_extras as dx  # noqa: E402
from d2l_extras import _saved  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_LINES, MEDIAN_LINES, TOTAL_LINES = 15, 8, 1_950
# Each notebook's share of the lines (the sum leaves room to grow). Issue 47 added 122 for what
# runs sharded training and reads a trace: 02 the profiler, 07 tensor parallelism, 08 FSDP2,
# 09 MFU.
BUDGET = {"00": 112, "01": 180, "02": 185, "03": 179, "04": 200, "05": 196, "06": 190,
          "07": 190, "08": 240, "09": 250}
VOCABULARY = frozenset("""
    setup hardware_report use_slide_style check by_profile problem_size
    default_device devices cuda_gpus
    measure measure_interleaved format_seconds synchronize
    compare check_prediction Band bar_chart
    record_timeline plot_timeline busy_time profile_trace one_thread_if_busy
    allow_tf32 maybe_compile last_level_cache dtype_supported
    launch ring_time speedup bus_bandwidth
    load_images evaluate_accuracy peak_memory capstone_job
    roofline plot_roofline TinyGPT load_text
""".split())
DX_NAME = re.compile(r"\bdx\.([A-Za-z_]\w*)")


def code_cells(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, c, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "code"]


def teaching(cell):
    return not (hidden(cell) or is_solution(cell) or is_check(cell))


def lines(source):
    return len(source.splitlines())


def defined(source):
    """Functions and classes a cell defines at its top level (magics left out)."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    names = set()
    for node in ast.parse(code).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def short_name(path):
    return path.name[:2]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_teaching_cells_are_short(path):
    sizes = {i: lines(s) for i, c, s in code_cells(path) if teaching(c)}
    long = {f"cell {i}": n for i, n in sizes.items() if n > CELL_LINES}
    assert not long, f"{path.name}: split these cells (at most {CELL_LINES} lines): {long}"
    assert statistics.median(sizes.values()) <= MEDIAN_LINES, \
        f"{path.name}: median teaching cell {statistics.median(sizes.values())} lines"
    total, budget = sum(sizes.values()), BUDGET[short_name(path)]
    assert total <= budget, f"{path.name}: {total} lines of teaching code (budget {budget})"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_set_up_cells_define_no_lesson(path):
    bad = [i for i, c, s in code_cells(path) if hidden(c) and "setup" not in
           c["metadata"].get("tags", []) and re.search(r"^\s*(def|class) ", s, re.M)]
    assert not bad, f"{path.name}: cells {bad} are no-slide but define functions; show them"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_calls_only_the_vocabulary(path):
    used = {n for _, _, s in code_cells(path) for n in DX_NAME.findall(s)} - set(_saved.NAMES)
    assert used <= VOCABULARY, f"{path.name}: dx names outside the vocabulary: {sorted(used - VOCABULARY)}"
    mine = {n for _, c, s in code_cells(path) for n in defined(s)}
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    saved_here = {n for _, code in saved_blocks(cells) for n in public_names(code)}
    clash = sorted(mine & set(dx.__all__) - saved_here)
    assert not clash, f"{path.name}: defines {clash}, which dx already names: rename them"


def test_the_vocabulary_is_small_and_exists():
    assert len(VOCABULARY) <= 40
    assert VOCABULARY <= set(dx.__all__), sorted(VOCABULARY - set(dx.__all__))
    by_hand = set(dx.__all__) - set(_saved.NAMES)
    assert len(by_hand) <= 40, f"{len(by_hand)} hand-written dx names: {sorted(by_hand - VOCABULARY)}"
    assert sum(BUDGET.values()) <= TOTAL_LINES
    assert set(BUDGET) == {short_name(p) for p in NOTEBOOKS}


def test_the_checks_catch_what_they_should():
    assert defined("def compare(a):\n    pass\nclass Block: pass\nx = 1\n%time y = 2") == \
        {"compare", "Block"}
    assert DX_NAME.findall("dx.measure(f); dx.kvstore.KVStore") == ["measure", "kvstore"]
    assert teaching({"cell_type": "code", "metadata": {}, "source": "x = 1"})
    assert not teaching({"cell_type": "code", "metadata": {"tags": ["no-slide"]}, "source": ""})
