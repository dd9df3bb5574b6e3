"""Ready to teach (issue 33): every notebook ends the same way and carries what a class needs.

- its last sections are Quiz, Summary, Exercises and Sources, in this order;
- the quiz asks 3-5 questions and a worked solution (Markdown) answers each of them;
- every exercise has a worked solution in code, `# @title Exercise N ...`, whose regions the
  student version removes (tools/student.py) leaving code that compiles and every name that the
  exercise's check reads; each check names its exercise;
- every slide that carries an idea (one that opens with a heading, Sources aside) has speaker
  notes in its cell's metadata (`notes`), which `make slides` shows in the speaker view;
- no slide holds more than nbmeta.WORDS words of prose, no lecture part more than 35 slides;
- run by nbval in this session (tests/nbval_plugin.py keeps the runs; this file runs on the
  notebooks' worker, after them), a notebook prints at most one line saying that GPU-only
  content was skipped here.
"""
import ast
import copy
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
import nbval_plugin  # noqa: E402
from tools import deckcheck, hosted, nbmeta, nbsite, student  # noqa: E402
from tools.alarms import output_texts  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
ENDING = ["Quiz", "Summary", "Exercises", "Sources"]
NOTE_WORDS = 120
ITEM = re.compile(r"^\d+\.\s", re.M)
TITLE = re.compile(r"^# @title Exercise (\d+)\b")
LABEL = re.compile(r"\bdx\.check\(\s*[\"']Exercise (\d+)[\"']")
SKIPPED = re.compile(r"\b(skipped|not run here)\b", re.I)


def load(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


text = hosted.source_text


def section_starts(cells):
    """{'Quiz': index, ...} for every `##` heading, and the order they come in."""
    found = []
    for i, cell in enumerate(cells):
        if nbmeta.heading_level(cell) == 2:
            found.append((nbmeta.heading_text(cell), i))
    return found


def ending(cells):
    sections = section_starts(cells)
    return [name for name, _ in sections[-len(ENDING):]], dict(sections)


def slides(cells):
    """Each (sub-)slide as (index of its first cell, [its cells]), in order."""
    out = []
    for i, cell in enumerate(cells):
        if nbmeta.starts_slide(cell):
            out.append((i, [cell]))
        elif cell["metadata"].get("slideshow", {}).get("slide_type") == "-" and out:
            out[-1][1].append(cell)
    return out


def parts(cells, stem="demo"):
    """Slides per lecture part, as `make slides` cuts a CPU run's decks (nbsite.for_lecture:
    no Exercises, the notebook `stem`'s one On a GPU slide for its gpu-only cells)."""
    nb = nbformat.from_dict({"cells": copy.deepcopy(cells), "metadata": {}})
    nbsite.for_lecture(nb, stem, gpu=False)
    return [sum(map(nbmeta.starts_slide, part)) for _, part in nbsite.lecture_parts(nb)]


def bound_names(source):
    """Names a cell binds in the notebook's namespace (not inside its functions)."""
    found, todo = set(), list(ast.parse(source).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)  # its body is a scope of its own
        elif isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                               ast.GeneratorExp)):
            continue
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        else:
            todo.extend(ast.iter_child_nodes(node))
    return found


def loaded_names(source):
    """Names a cell reads that it does not bind anywhere itself (loops, functions, arguments)."""
    tree = ast.parse(source)
    local = {node.id for node in ast.walk(tree)
             if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}
    local |= {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    return {node.id for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)} - local


def names_read(cell):
    """Names a code cell of the student version reads from the notebook's namespace."""
    source = text(cell)
    if nbmeta.is_solution(cell):  # stripped too in the student version
        source = student.strip_source(source, code=True)
    try:
        return loaded_names(source)
    except SyntaxError:  # IPython magics
        return set()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_lesson_ends_with_quiz_summary_exercises_sources(path):
    names, _ = ending(load(path))
    assert names == ENDING, f"{path.name}: the last sections are {names}, want {ENDING}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_quiz_asks_three_to_five_questions_and_answers_them(path):
    cells = load(path)
    _, at = ending(cells)
    quiz = [c for c in cells[at["Quiz"]:at["Summary"]] if not nbmeta.is_solution(c)
            and c["cell_type"] == "markdown"]
    answers = [c for c in cells[at["Quiz"]:at["Summary"]] if nbmeta.is_solution(c)]
    asked = sum(len(ITEM.findall(text(c))) for c in quiz)
    assert 3 <= asked <= 5, f"{path.name}: the quiz asks {asked} questions, want 3 to 5"
    assert len(answers) == 1 and answers[0]["cell_type"] == "markdown", \
        f"{path.name}: answer the quiz in one Markdown cell with a BEGIN SOLUTION region"
    given = len(ITEM.findall(text(answers[0])))
    assert given == asked, f"{path.name}: {asked} questions, {given} numbered answers"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_has_a_worked_solution_and_its_checks_name_it(path):
    cells = load(path)
    _, at = ending(cells)
    listed = len(ITEM.findall(text(cells[at["Exercises"]])))
    tail = cells[at["Exercises"]:at["Sources"]]
    solved = [int(TITLE.match(text(c)).group(1)) for c in tail
              if c["cell_type"] == "code" and nbmeta.is_solution(c) and TITLE.match(text(c))]
    untitled = [i for i, c in enumerate(tail) if c["cell_type"] == "code"
                and nbmeta.is_solution(c) and not TITLE.match(text(c))]
    assert listed >= 3, f"{path.name}: list the exercises as a numbered list ({listed} found)"
    assert not untitled, f"{path.name}: start each solution with '# @title Exercise N ...'"
    assert sorted(set(solved)) == list(range(1, listed + 1)), \
        f"{path.name}: exercises 1-{listed} listed, solutions for {sorted(set(solved))}"
    assert solved == sorted(solved), f"{path.name}: solutions out of order: {solved}"
    checked = [int(n) for c in cells for n in LABEL.findall(text(c))]
    assert set(checked) <= set(range(1, listed + 1)), \
        f"{path.name}: checks name exercises {checked}, but {listed} are listed"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_student_version_keeps_what_the_checks_read(path):
    cells = load(path)
    code = [(i, c) for i, c in enumerate(cells) if c["cell_type"] == "code"]
    for n, (i, cell) in enumerate(code):
        if not nbmeta.is_solution(cell):
            continue
        stripped = student.strip_source(text(cell), code=True)
        compile(stripped, f"{path.name} cell {i} (student version)", "exec")
        assert "BEGIN SOLUTION" not in stripped and "END SOLUTION" not in stripped
        lost = bound_names(text(cell)) - bound_names(stripped)
        # Names a later cell reads (a check, the next exercise), less those it assigns again.
        read = set().union(*(names_read(c) for _, c in code[n + 1:]))
        assert not lost & read, (
            f"{path.name} cell {i}: a later cell reads {sorted(lost & read)}, which only the "
            f"solution assigns; declare it above the region (`name = ...`)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_idea_slide_has_speaker_notes(path):
    missing, long = [], []
    for i, group in slides(load(path)):
        head = group[0]
        if not nbmeta.heading_level(head) or nbmeta.heading_text(head).startswith("Sources"):
            continue
        notes = head["metadata"].get("notes")
        if not isinstance(notes, str) or not notes.strip():
            missing.append(f"cell {i} ({text(head).splitlines()[0][:40]})")
        elif len(notes.split()) > NOTE_WORDS:
            long.append(f"cell {i}: {len(notes.split())} words")
    assert not missing, f"{path.name}: add metadata 'notes' to {missing}"
    assert not long, f"{path.name}: speaker notes of at most {NOTE_WORDS} words: {long}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_slides_hold_little_prose_and_parts_fit_a_lecture(path):
    cells = load(path)
    wordy = [(i, sum(nbmeta.prose_words(c) for c in group)) for i, group in slides(cells)]
    wordy = [f"cell {i}: {n} words" for i, n in wordy if n > nbmeta.WORDS]
    assert not wordy, f"{path.name}: at most {nbmeta.WORDS} words a slide: {wordy}"
    counts = parts(cells, path.stem)
    assert max(counts) <= deckcheck.MAX_SLIDES, \
        f"{path.name}: {counts} slides per part; split with a `#` heading, or trim"


def skipped_lines(cells):
    return [line for cell in cells if cell["cell_type"] == "code"
            for text in output_texts(cell.get("outputs", [])) for line in text.splitlines()
            if SKIPPED.search(line)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_at_most_one_line_says_what_was_skipped(path):
    folder = nbval_plugin.executed_folder([path])
    if folder is None:
        pytest.skip("nbval did not run this notebook in this session (make test runs it)")
    lines = skipped_lines(load(folder / path.name))
    assert len(lines) <= 1, f"{path.name}: gather GPU-only cells into one section: {lines}"


def test_the_checks_of_this_file_can_fail():
    md = lambda s, **m: {"cell_type": "markdown", "source": s, "metadata": m}  # noqa: E731
    cells = [md("# T"), md("## Quiz"), md("## Exercises"), md("## Summary"), md("## Sources")]
    assert ending(cells)[0] == ["Quiz", "Exercises", "Summary", "Sources"]
    assert parts([md("# A", slideshow={"slide_type": "slide"}),
                  md("# B", slideshow={"slide_type": "slide"})]) == [1, 1]
    assert bound_names("x = 1\nfor y in z: pass") == {"x", "y"}
    assert bound_names("def f(a):\n    k = a\nz = [j for j in a]") == {"f", "z"}
    assert loaded_names("dx.check('Exercise 1', x, 2)") == {"dx", "x"}
    assert loaded_names("for i in a: print(i)\nf = lambda t: t + b") == {"a", "print", "b"}
    with pytest.raises(ValueError, match="no END SOLUTION"):
        student.strip_source("# BEGIN SOLUTION\nx = 1\n", code=True)
    out = [{"output_type": "stream", "name": "stdout", "text": "GPU check skipped: none\nok\n"}]
    assert skipped_lines([{"cell_type": "code", "outputs": out}] * 2) == \
        ["GPU check skipped: none"] * 2
