"""Cells fit a slide, and bookkeeping stays out of the teaching cells (issue 16).

- a code cell has at most 25 lines, none wider than 80 characters (a projected slide shows that);
- a Markdown cell fits one slide by tools/nbmeta.py's estimate;
- `dx.notice` and the report's tables live only in cells tagged `no-slide`, which the decks
  leave out; `dx.record` lives out of the notebook, in notebooks/records/NN-name.py (make report
  and nbval run it after the last cell); no cell prints source code (`inspect.getsource`);
- every notebook ends with a short list of its sources.
"""
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from tools.nbmeta import SLIDE_LINES, cell_lines, hidden, is_solution  # noqa: E402
from tools.report import RECORDS_DIR, records_source  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_LINES, MAX_WIDTH = 25, 80
BOOKKEEPING = re.compile(r"\bdx\.(record|notice)\s*\(")
RECORD = re.compile(r"\bdx\.record\s*\(")


def cells(path):
    return list(enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]))


def source(cell):
    return "".join(cell["source"])


def too_big(cell):
    lines = source(cell).splitlines()
    wide = [n for n, line in enumerate(lines, 1) if len(line) > MAX_WIDTH]
    problems = []
    if len(lines) > MAX_LINES:
        problems.append(f"{len(lines)} lines (at most {MAX_LINES})")
    if wide:
        problems.append(f"lines {wide[:6]} wider than {MAX_WIDTH} characters")
    return "; ".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_cells_fit_a_slide(path):
    bad = [f"cell {i}: {too_big(c)}" for i, c in cells(path)
           if c["cell_type"] == "code" and too_big(c)]
    assert not bad, f"{path.name}: " + "; ".join(bad)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_markdown_cells_fit_a_slide(path):
    bad = [f"cell {i} ({cell_lines(c)} lines)" for i, c in cells(path)
           if c["cell_type"] == "markdown" and not hidden(c) and cell_lines(c) > SLIDE_LINES]
    assert not bad, f"{path.name}: split these Markdown cells: {bad}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_bookkeeping_stays_out_of_teaching_cells(path):
    bad = [i for i, c in cells(path) if c["cell_type"] == "code" and not hidden(c)
           and BOOKKEEPING.search(source(c))]
    assert not bad, (f"{path.name}: cells {bad} call dx.record/dx.notice; move dx.notice into a "
                     f"cell tagged no-slide, dx.record into notebooks/records/{path.stem}.py")
    recorded = [i for i, c in cells(path) if RECORD.search(source(c))]
    where = f"notebooks/{RECORDS_DIR}/{path.stem}.py"
    assert not recorded, f"{path.name}: cells {recorded} call dx.record; move it to {where}"
    assert RECORD.search(records_source(path) or ""), \
        f"{where}: record what the notebook measured, for make report"
    dumps = [i for i, c in cells(path) if "getsource(" in source(c)]
    assert not dumps, f"{path.name}: cells {dumps} print source code; show it in a cell instead"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_sources_listed_at_the_end(path):
    markdown = [source(c) for _, c in cells(path) if c["cell_type"] == "markdown"]
    tail = "\n".join(markdown[-3:])
    assert re.search(r"^#+\s*(Sources|References)\b", tail, re.M), \
        f"{path.name}: end with a '## Sources' list (the references, out of the argument)"


def test_the_checks_catch_what_they_should():
    big = {"cell_type": "code", "source": ["x = 1\n"] * 26, "metadata": {}}
    wide = {"cell_type": "code", "source": ["y" * 81], "metadata": {}}
    assert "26 lines" in too_big(big) and "wider" in too_big(wide)
    assert not too_big({"cell_type": "code", "source": ["x = 1\n"] * 25, "metadata": {}})
    assert BOOKKEEPING.search("dx.record('k', 1.0, 'x')") and RECORD.search("dx.record (")
    assert not RECORD.search("dx.record_timeline(f)")
    assert hidden({"metadata": {"tags": ["no-slide"]}}) and not hidden({"metadata": {}})


def words(path):
    # Worked solutions and the quiz's answers are not the lesson: the student opens them.
    return sum(len(source(c).split()) for _, c in cells(path)
               if c["cell_type"] == "markdown" and not is_solution(c))


def test_prose_stays_short():
    # Issue 16 cut the prose by a quarter, to about 13,000 words: each fact said once.
    total = {p.name: words(p) for p in NOTEBOOKS}
    # Issue 19 added notebook 05 (memory and precision) with about 1,600 words; issue 20 the
    # performance model (00, about 700) and the capstone (09, about 1,800).
    # Issue 33 added a quiz to each notebook. Issue 45 moved the readings out of the code
    # (verdict strings, 1,000 lines cut) into prose that says what to expect and why: 19,000.
    # Issue 47 ran FSDP2 and tensor parallelism, MFU and a profiler trace: 20,000.
    # Issue 48 gave the first parts of 04, 08 and 09 a quiz and a summary of their own.
    assert sum(total.values()) <= 20_500, f"{sum(total.values())} words of prose: {total}"
