"""Slide metadata (tools/nbmeta.py) and the slides/pages builder (tools/nbsite.py), without a browser.

tests/test_browser.py opens what these build in Chromium; tests/test_notebooks_stored_clean.py
checks that every stored notebook carries the metadata nbmeta sets.
"""
import base64
import importlib.util
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from tools import hosted, nbmeta, nbsite  # noqa: E402


def md(text, **meta):
    return {"cell_type": "markdown", "metadata": dict(meta), "source": text}


def code(text, outputs=()):
    return {"cell_type": "code", "execution_count": None, "metadata": {},
            "outputs": list(outputs), "source": text}


def notebook(cells):
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3",
            "language": "python", "name": "python3"}, "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


# ---------------------------------------------------------------- the slide rules

def test_each_section_heading_starts_a_slide():
    cells = [md("# Title\n\nintro"), code("x = 1"), md("## Section\ntext"), code("y = 2"),
             md("### Part\ntext"), md("plain text"), md("#hashtag, not a heading")]
    assert nbmeta.slide_types(cells) == ["slide", "-", "slide", "-", "subslide", "-", "-"]


def test_first_cell_always_starts_a_slide():
    assert nbmeta.slide_types([md("no heading"), code("x")]) == ["slide", "-"]


def test_a_cell_that_overfills_the_slide_starts_a_subslide():
    long_code = "\n".join(f"x{i} = {i}" for i in range(nbmeta.SLIDE_LINES))
    cells = [md("## Section"), code("a = 1"), code(long_code), code("b = 2"), md("## Next")]
    assert nbmeta.slide_types(cells) == ["slide", "-", "subslide", "subslide", "slide"]


def test_a_heading_gives_its_words_and_a_slide_type_says_where_slides_start():
    assert nbmeta.heading_text(md("\n## Quiz \n\n1. Why?")) == "Quiz"
    assert nbmeta.heading_text(md("#hashtag, not a heading")) == ""
    assert nbmeta.heading_text(code("# a comment")) == ""
    kinds = ["slide", "subslide", "-", "skip", "notes"]
    cells = [md("x", slideshow={"slide_type": kind}) for kind in kinds] + [md("no type")]
    assert [nbmeta.starts_slide(c) for c in cells] == [True, True, False, False, False, False]


def test_figures_take_room_on_a_slide():
    assert nbmeta.cell_lines(md("![c](../images/x.png)")) == 1 + nbmeta.FIGURE_LINES
    assert nbmeta.cell_lines(code("dx.bar_chart({'a': 1})")) == \
        1 + nbmeta.OUTPUT_LINES + nbmeta.FIGURE_LINES
    assert nbmeta.cell_lines(code("x = 1")) == 1 + nbmeta.OUTPUT_LINES
    # A line longer than the slide is wide wraps.
    assert nbmeta.cell_lines(md("w" * (2 * nbmeta.WRAP + 1))) == 3


def test_apply_sets_kernel_and_every_cell_and_keeps_other_metadata():
    nb = notebook([md("# T", tags=["keep"]), code("x = 1")])
    nbmeta.apply(nb)
    assert nb["metadata"]["kernelspec"] == {"display_name": "Python 3 (ipykernel)",
                                            "language": "python", "name": "python3"}
    assert nb["metadata"]["language_info"] == {"name": "python"}
    assert nb["cells"][0]["metadata"] == {"tags": ["keep"], "slideshow": {"slide_type": "slide"}}
    assert nb["cells"][1]["metadata"] == {"slideshow": {"slide_type": "-"}}


def test_apply_rejects_what_is_not_a_notebook():
    with pytest.raises(ValueError, match="not a notebook"):
        nbmeta.apply({"worksheets": []})
    with pytest.raises(ValueError, match="not a notebook"):
        nbmeta.apply([1, 2])


@pytest.mark.parametrize("indent", [1, 2])
def test_rewrite_writes_nbformats_layout_and_is_idempotent(indent):
    nb = notebook([md("# Größe × Zeit\n"), code("print('µs')")])
    text = json.dumps(nb, indent=indent, ensure_ascii=True) + "\n"
    once = nbmeta.rewrite(text)
    assert nbmeta.rewrite(once) == once                       # a second run changes nothing
    assert once == json.dumps(nbmeta.apply(json.loads(text)), indent=1, sort_keys=True,
                              ensure_ascii=False) + "\n"    # as nbformat (Jupyter) writes it
    # Everything but the two metadata fields is as it was.
    strip = json.loads(once)
    for cell in strip["cells"]:
        del cell["metadata"]["slideshow"]
    strip["metadata"]["kernelspec"] = nb["metadata"]["kernelspec"]
    assert strip == nb


def test_command_line_check_then_write(tmp_path, capsys):
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(notebook([md("# T"), code("x")]), indent=1, sort_keys=True,
                               ensure_ascii=False) + "\n", encoding="utf-8")
    before = path.read_bytes()
    assert nbmeta.main(["--check", str(path)]) == 1
    assert path.read_bytes() == before, "--check must not write"
    assert "out of date" in capsys.readouterr().out
    assert nbmeta.main([str(path)]) == 0
    after = path.read_bytes()
    assert after != before
    assert nbmeta.main(["--check", str(path)]) == 0
    assert nbmeta.main([str(path)]) == 0 and path.read_bytes() == after


# ---------------------------------------------------------------- a small executed notebook

def figure_png() -> str:
    """A real matplotlib PNG, base64 as a notebook output stores it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(["eager", "compiled"], [2.0, 1.0])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def repo_image() -> str:
    """A figure from images/, as the notebooks link to it."""
    return "../images/" + sorted((ROOT / "images").glob("*.png"))[0].name


SECTIONS = 4  # the `#` and `##` headings of executed_notebook()'s first part
PART2 = 2     # ... and of its second part
SOLUTION = "answer = 1 + 1"
ANSWER_IN_WORDS = "Two: one plus one."


def executed_notebook(path: Path) -> Path:
    """Write a tiny notebook with outputs (as `make report` would leave it) and the slide metadata."""
    long_code = "\n".join(f"step_{i} = {i}  # a long cell becomes a sub-slide" for i in range(30))
    nb = notebook([
        md("# Demo deck\n\nOn $k$ devices the sum is $\\sum_i g_i$.",
           notes="Say: the sum is the **same** on any k."),
        # The launch badges load from the platforms' sites: left out of the offline pages.
        md(hosted.badges("notebooks/demo.ipynb"), tags=["launch", "no-slide"]),
        {**code(hosted.setup_source()), "metadata": {"tags": ["setup", "no-slide"]}},
        code("import d2l_extras as dx\ndx.hardware_report();",
             [{"output_type": "stream", "name": "stdout",
               "text": "CPU     : Test CPU, 2 cores\nGPU     : none visible\n"}]),
        md(f"## A picture\n\n![The ring]({repo_image()})"),
        code("dx.bar_chart({'eager': 2.0, 'compiled': 1.0})",
             [{"output_type": "display_data", "metadata": {},
               "data": {"image/png": figure_png(), "text/plain": "<Figure>"}}]),
        md("## Long code", notes="Point at the last line."),
        code(long_code, [{"output_type": "stream", "name": "stdout", "text": "done\n"}]),
        md("## Try it\n\n1. Add one to one.", notes="Homework: five minutes."),
        code(f"# @title Exercise 1: add\nanswer = ...\n# BEGIN SOLUTION\n{SOLUTION}\n"
             "# END SOLUTION"),
        md(f"**Exercise 1, discussion.**\n<!-- BEGIN SOLUTION -->\n{ANSWER_IN_WORDS}\n"
           "<!-- END SOLUTION -->"),
        code("dx.check('Exercise 1', answer, 2)",
             [{"output_type": "stream", "name": "stdout", "text": "Exercise 1: right\n"}]),
        md("## Exercises\n\n1. Homework the notebook keeps.", notes="Not in the deck."),
        code("print('an exercise')", [{"output_type": "stream", "name": "stdout",
                                       "text": "an exercise\n"}]),
        md("# Part two\n\nThe second lecture.", notes="Start after the break."),
        md("## More", notes="The end."),
    ])
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"cell-{i}"
        if cell["cell_type"] == "code":
            cell["execution_count"] = i
    nbmeta.apply(nb)
    path.write_text(json.dumps(nb, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


# make slides and make html need nbconvert; make test installs it, a GPU machine's own
# environment (make gpu-check's unit tests) may not have it.
needs_nbconvert = pytest.mark.skipif(importlib.util.find_spec("nbconvert") is None,
                                     reason="nbconvert is not installed (make installs it)")


def build(kind: str, tmp: Path) -> Path:
    src = tmp / "executed"
    src.mkdir(exist_ok=True)
    executed_notebook(src / "demo.ipynb")
    nbsite.build(kind, [src / "demo.ipynb"], tmp / kind, ROOT / "notebooks")
    return tmp / kind


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if importlib.util.find_spec("nbconvert") is None:
        pytest.skip("nbconvert is not installed (make installs it)")
    tmp = tmp_path_factory.mktemp("site")
    return {"slides": build("slides", tmp), "html": build("html", tmp)}


def top_sections(deck: str) -> int:
    # nbconvert nests each slide's sub-slides in the slide's <section>: count the outer ones.
    depth, top = 0, 0
    for tag in re.findall(r"<(/?)section\b", deck):
        if tag == "":
            top += depth == 0
            depth += 1
        else:
            depth -= 1
    return top


def test_slides_have_one_slide_per_section_and_a_deck_per_part(built):
    deck = (built["slides"] / "demo.slides.html").read_text(encoding="utf-8")
    assert top_sections(deck) == SECTIONS
    assert "Homework the notebook keeps" not in deck and "an exercise" not in deck, \
        "the Exercises are the notebook's: a lecture leaves them out"
    assert "Homework the notebook keeps" in (built["html"] / "demo.html").read_text("utf-8")
    part2 = (built["slides"] / "demo-part2.slides.html").read_text(encoding="utf-8")
    assert top_sections(part2) == PART2
    assert "<title>Part two slides</title>" in part2 and "Demo deck" not in part2
    assert "Part two" not in deck
    assert not (built["html"] / "demo-part2.html").exists(), "a page shows the whole notebook"


def test_speaker_notes_come_from_the_metadata_and_solutions_stay_out(built):
    deck = (built["slides"] / "demo.slides.html").read_text(encoding="utf-8")
    notes = re.findall(r'<aside class="notes">(.*?)</aside>', deck, re.S)
    said = " ".join(notes)
    for text in ("the <strong>same</strong> on any k", "Point at the last line",
                 "Homework: five minutes", ANSWER_IN_WORDS):
        assert text in said, f"{text!r} is not in the speaker notes"
    assert len(notes) == 4
    # The room sees neither the worked solution's code nor its check.
    assert SOLUTION not in deck and "dx.check" not in deck
    page = (built["html"] / "demo.html").read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" in page, "the page shows the whole notebook, solutions included"


@pytest.mark.parametrize("kind,name", [("slides", "demo.slides.html"), ("html", "demo.html")])
def test_outputs_need_no_network(built, kind, name):
    page = (built[kind] / name).read_text(encoding="utf-8")
    remote = re.findall(r"""(?:src|href)=["'](https?:[^"']+)""", page)
    assert not remote, f"{name} loads from the network: {remote}"
    for local in re.findall(r"""<(?:script|link)[^>]+(?:src|href)=["']([^"'?]+)""", page):
        assert (built[kind] / local).is_file(), f"{name} refers to {local}, which is not there"
    assert "MathJax.js" in page


@pytest.mark.parametrize("kind,name", [("slides", "demo.slides.html"), ("html", "demo.html")])
def test_markdown_figure_and_plot_are_embedded(built, kind, name):
    page = (built[kind] / name).read_text(encoding="utf-8")
    assert "../images/" not in page, "the Markdown figure should be embedded, not linked"
    assert page.count("data:image/png;base64,") >= 2


@pytest.mark.parametrize("kind", ["slides", "html"])
def test_index_lists_notebooks_and_hardware(built, kind):
    index = (built[kind] / "index.html").read_text(encoding="utf-8")
    target = "demo.slides.html" if kind == "slides" else "demo.html"
    assert f'href="{target}"' in index and "Demo deck" in index
    assert "Test CPU, 2 cores" in index
    assert ('href="demo-part2.slides.html"' in index) == (kind == "slides")


def test_index_shows_the_report_summary(tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({
        "profile": "ci", "generated": "2026-01-01T00:00:00+00:00", "total_seconds": 12.5,
        "hardware": {"cpu": "Summary CPU", "cores": 2, "logical_cores": 2, "accelerators": [],
                     "torch_threads": 2, "torch": "2.x", "cuda_build": None, "profile": "ci",
                     "ram_total": 2 ** 34, "ram_available": 2 ** 33},
        "notebooks": [{"notebook": "demo", "seconds": 3.25, "error": None}],
        "machine_load": {"others_cores": 1.8, "cores": 2, "busy": True}}))
    rows = [{"file": "demo.html", "notebook": "demo.ipynb", "title": "Demo", "hardware": "hw"}]
    index = nbsite.write_index(tmp_path, "html", rows, summary).read_text()
    assert "Summary CPU" in index and "ran in 3.2 s" in index and "<code>ci</code>" in index
    assert "kept 1.8 of 2 cores busy" in index and "rebuild on a quiet machine" in index
    rows[0]["notebook"] = "other.ipynb"
    summary.write_text(json.dumps({"notebooks": [{"notebook": "other.ipynb", "seconds": 1,
                                                  "error": "cell 3: ValueError: boom"}]}))
    index = nbsite.write_index(tmp_path, "html", rows, summary).read_text()
    assert "FAILED: cell 3: ValueError: boom" in index


def test_build_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="slides' or 'html"):
        nbsite.build("pdf", [tmp_path / "x.ipynb"], tmp_path, ROOT / "notebooks")
    with pytest.raises(FileNotFoundError, match="make report"):
        nbsite.build("slides", [], tmp_path, ROOT / "notebooks")


@needs_nbconvert
def test_notebook_without_slide_metadata_is_still_cut_into_slides(tmp_path, capsys):
    path = executed_notebook(tmp_path / "demo.ipynb")
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        del cell["metadata"]["slideshow"]
    path.write_text(json.dumps(nb))
    rows = nbsite.build("slides", [path], tmp_path / "out", ROOT / "notebooks")
    start = next(i for i, c in enumerate(nb["cells"]) if "## Exercises" in "".join(c["source"]))
    kept = nb["cells"][:start] + nb["cells"][start + 2:]  # the Exercises stay out
    kinds = [t for t in nbmeta.slide_types(kept) if t in ("slide", "subslide")]
    assert [row["slides"] for row in rows] == [len(kinds) - PART2, PART2]
    assert "run python tools/nbmeta.py" in capsys.readouterr().out


@needs_nbconvert
def test_command_line_builds_into_the_given_directory(tmp_path):
    executed_notebook((tmp_path / "nbs").mkdir() or tmp_path / "nbs" / "demo.ipynb")
    run = subprocess.run([sys.executable, "-m", "tools.nbsite", "html",
                          "--notebooks", str(tmp_path / "nbs"), "--out", str(tmp_path / "out")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "demo.html").is_file() and (tmp_path / "out" / "index.html").is_file()
    assert run.stdout.splitlines()[-1].startswith("machine load: not measured"), \
        "make slides says how busy the machine was (here: no summary to say it)"


def test_cells_tagged_no_slide_are_skipped():
    cells = [md("# T"), code("import torch", ), md("## S"), code("x = 1"), code("dx.record()")]
    cells[1]["metadata"]["tags"] = [nbmeta.NO_SLIDE]
    cells[4]["metadata"]["tags"] = ["other", nbmeta.NO_SLIDE]
    assert nbmeta.slide_types(cells) == ["slide", "skip", "slide", "-", "skip"]
    # The first cell always opens the deck, tagged or not.
    first = md("# T", tags=[nbmeta.NO_SLIDE])
    assert nbmeta.slide_types([first]) == ["slide"]


def test_a_plot_gets_a_subslide_of_its_own():
    cells = [md("## S"), code("x = 1"), code("dx.bar_chart({'a': 1})"), md("what it shows"),
             code("y = 2"), code("d2l.Animator(xlabel='epoch')"), md("## Next")]
    assert nbmeta.slide_types(cells) == ["slide", "-", "subslide", "subslide", "-", "subslide",
                                         "slide"]


def test_a_worked_solution_is_collapsed_graded_and_out_of_the_deck():
    solution = code("# @title Exercise 1: x\nx = ...\n# BEGIN SOLUTION\nx = 2\n# END SOLUTION")
    words = md("**Exercise 1, discussion.**\n<!-- BEGIN SOLUTION -->\nBecause.\n"
               "<!-- END SOLUTION -->")
    check = code("dx.check('Exercise 1', x, 2)")
    nb = nbmeta.apply(notebook([md("# T"), md("## Exercises\n1. x"), solution, words, check]))
    assert [c["metadata"]["slideshow"]["slide_type"] for c in nb["cells"]] == \
        ["slide", "slide", "skip", "notes", "skip"]
    meta = nb["cells"][2]["metadata"]
    assert meta["jupyter"] == {"outputs_hidden": True, "source_hidden": True}
    assert meta["cellView"] == "form" and "cellView" not in nb["cells"][3]["metadata"]
    assert meta["nbgrader"]["solution"] is True and meta["nbgrader"]["grade_id"] == "solution-1"
    assert nb["cells"][3]["metadata"]["nbgrader"]["grade_id"] == "solution-2"
    assert "nbgrader" not in nb["cells"][4]["metadata"]
    # A cell whose markers are removed opens as any other again.
    solution["source"] = "x = 2"
    nbmeta.apply(nb)
    assert not {"jupyter", "cellView", "nbgrader"} & set(nb["cells"][2]["metadata"])


def test_a_slide_holds_at_most_WORDS_words_of_prose():
    half = " ".join(["word"] * (nbmeta.WORDS // 2))
    cells = [md("## S"), md(half), md(half), md("<!-- a comment -->\n" + "w " * 3)]
    assert nbmeta.slide_types(cells) == ["slide", "-", "subslide", "-"]
    assert nbmeta.prose_words(md("one ![x](data:image/png;base64,AAAA) two <!-- x y -->")) == 3


def test_code_past_15_lines_starts_a_subslide_and_a_stack_holds_six():
    twelve = code("\n".join(f"x{i} = {i}" for i in range(12)))
    assert nbmeta.slide_types([md("## S"), twelve, code("y = 1\nz = 2\nw = 3\nv = 4")]) == \
        ["slide", "-", "subslide"], "12 + 4 lines of code: more than 15 on one slide"
    cells = [md("## S")] + [md(f"### {i}") for i in range(7)]
    kinds = nbmeta.slide_types(cells)
    assert kinds == ["slide"] + ["subslide"] * 5 + ["slide", "subslide"], \
        "the 7th slide of a stack starts a column of its own"


@pytest.mark.parametrize("source, draws", [
    ("dx.bar_chart({'a': 1})", True),
    ("fig, ax = plt.subplots()\nax.plot([1, 2])", True),
    ("for k in ks:\n    ax.plot(xs, ys[k])", True),
    ("def plot_sweep(curves):\n    ax = plt.subplots()[1]", False),   # defines, draws nothing
    ("if gpus:\n    dx.plot_timeline(events)", False),   # draws only on some machines
    ("x = 1  # plt.plot in a comment", False),
    ("%matplotlib inline\ndx.plot_roofline(1, 2)", True),
    ("not python (", False),
])
def test_a_cell_draws_when_it_calls_a_plot_outside_defs_and_ifs(source, draws):
    assert nbsite.draws_at_top_level(source) is draws


def lecture(tmp_path, gpu):
    """A small executed notebook shaped for its decks, with one reference slide written."""
    ref = tmp_path / "reference"
    ref.mkdir(exist_ok=True)
    (ref / "07.md").write_text("## On a GPU: the reference run\n\n| H100 | 54.7 GB/s |\n"
                               "<!-- notes -->\nPoint at the pinned copy.", encoding="utf-8")
    gpu_cells = [md("## On a GPU"), code("if gpus:\n    pass", [])]
    for cell in gpu_cells:
        cell["metadata"]["tags"] = [nbsite.GPU_ONLY]
    nb = nbmeta.apply(notebook([md("# T"), md("## Idea"), code("x = 1"), *gpu_cells,
                                md("aside", tags=[nbmeta.NO_SLIDE]), code("y = 2"),
                                md("## Quiz"), md("## Summary"), md("## Exercises"),
                                code("dx.bar_chart({'a': 1})"), md("## Sources")]))
    import nbformat
    nb = nbformat.from_dict(nb)
    nbsite.for_lecture(nb, "07-demo", gpu=gpu, reference=ref)
    return nb.cells


def test_a_cpu_deck_shows_one_on_a_gpu_slide_in_place_of_the_gpu_cells(tmp_path):
    cells = lecture(tmp_path, gpu=False)
    heads = [nbmeta.heading_text(c) for c in cells if nbmeta.heading_level(c)]
    assert heads == ["T", "Idea", "On a GPU: the reference run", "Quiz", "Summary", "Sources"]
    slide = next(c for c in cells if "54.7 GB/s" in c.source)
    assert slide.metadata["notes"] == "Point at the pinned copy." and "notes" not in slide.source
    assert slide.metadata["slideshow"]["slide_type"] == "slide"
    assert not any("if gpus" in c.source for c in cells), "the gpu-only cells are out"
    after = next(c for c in cells if c.source == "y = 2")
    assert after.metadata["slideshow"]["slide_type"] == "subslide", \
        "what follows the GPU cells (a no-slide cell aside) opens a slide of its own"
    assert not any("bar_chart" in c.source for c in cells), "the Exercises are the notebook's"


def test_a_gpu_deck_keeps_its_gpu_cells_and_a_drawing_cell_shows_its_figure(tmp_path):
    cells = lecture(tmp_path, gpu=True)
    assert any("if gpus" in c.source for c in cells)
    assert not any("54.7 GB/s" in c.source for c in cells), "its own run shows the GPU"
    drawing = nbmeta.apply(notebook([md("# T"), code("dx.bar_chart({'a': 1})"),
                                     code("ax.plot([1])")]))
    drawing["cells"][2]["metadata"]["tags"] = [nbsite.SHOW_INPUT]
    import nbformat
    nb = nbformat.from_dict(drawing)
    nbsite.for_lecture(nb, "xx-demo", gpu=True)
    assert nb.cells[1].metadata.tags == [nbsite.DRAWS, nbsite.HIDE_INPUT]
    assert nb.cells[2].metadata.tags == [nbsite.SHOW_INPUT, nbsite.DRAWS]


def test_a_missing_reference_slide_says_where_it_belongs(tmp_path):
    with pytest.raises(FileNotFoundError, match="03.md is missing.*README"):
        nbsite.on_a_gpu_slide("03-automatic-parallelism", tmp_path)
    assert nbsite.on_a_gpu_slide("demo", tmp_path) == [], "not one of the chapter's notebooks"


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")),
                         ids=lambda p: p.name[:2])
def test_every_notebook_has_its_on_a_gpu_slide_with_notes(path):
    [slide] = nbsite.on_a_gpu_slide(path.stem)
    assert slide.source.startswith("## On a GPU"), slide.source[:60]
    assert sum(map(bool, slide.source.splitlines())) <= 14, "one 1280x720 slide (the deck " \
        "check measures it)"
    assert slide.metadata["notes"], "what to say about the reference run"
    assert "placeholder" not in slide.source


@needs_nbconvert
def test_a_bookkeeping_cell_shows_its_output_alone(tmp_path):
    path = tmp_path / "demo.ipynb"
    cell = code("print('the table')", [{"output_type": "stream", "name": "stdout",
                                        "text": "the table\n"}])
    cell["metadata"]["tags"] = [nbsite.HIDE_INPUT]
    path.write_text(json.dumps(nbmeta.apply(notebook([md("# T"), cell]))), encoding="utf-8")
    nbsite.build("slides", [path], tmp_path / "out", ROOT / "notebooks")
    deck = (tmp_path / "out" / "demo.slides.html").read_text(encoding="utf-8")
    assert "the table" in deck and "print(" not in deck
