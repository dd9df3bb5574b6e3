"""Build reveal.js slide decks or static pages from executed notebooks (`make slides`, `make html`).

    python -m tools.nbsite slides --notebooks build/report/notebooks --out build/slides
    python -m tools.nbsite html   --notebooks build/report/notebooks --out build/html

From the executed copies `make report` writes: one file per notebook (a deck per lecture part),
an index.html with the hardware each ran on, and local copies of reveal.js and MathJax, so the
decks and pages work offline (in class). Figures are embedded as data URIs.
"""
from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(__file__).resolve().parent / "site" / "templates"
from tools import hosted, nbmeta
from tools import report as report_tool
from tools.alarms import output_texts

MATHJAX_CONFIG = "?config=TeX-AMS-MML_HTMLorMML-full,Safe"
# Cell tags for the decks: a bookkeeping cell shows its output alone; a cell whose work needs a
# GPU leaves a CPU-built deck, which gets the notebook's "On a GPU" slide instead; a drawing cell
# shows its figure without its code (unless tagged show-input), and the deck check finds a
# drawing cell that shows no figure.
HIDE_INPUT, SHOW_INPUT, GPU_ONLY, DRAWS = "hide-input", "show-input", "gpu-only", "draws"
REFERENCE = ROOT / "docs" / "reference" / "on-a-gpu"  # NN.md: a notebook's "On a GPU" slide
NOT_IN_DECKS = ("Exercises",)  # sections the notebook keeps and a lecture leaves out
_PLOT_CALL = re.compile(r"^(plt\.\w+|\w+\.(bar_chart|plot_\w+|plot|imshow|bar)|bar_chart|plot_\w+)$")


def _package_dir(name: str, *parts: str) -> Path:
    """A data directory inside an installed package, without importing the package."""
    spec = importlib.util.find_spec(name)
    path = spec and spec.submodule_search_locations and Path(
        next(iter(spec.submodule_search_locations)), *parts)
    if not path or not path.is_dir():  # the decks and pages never load them from a CDN
        raise FileNotFoundError(f"{name} is not installed (requirements.txt): it ships the "
                                "copy of reveal.js or MathJax that the slides and pages use")
    return path


def copy_assets(out: Path, slides: bool) -> dict:
    """Copy MathJax 2 and, for slides, reveal.js beside the output; return their relative URLs."""
    copy = functools.partial(shutil.copytree, dirs_exist_ok=True,
                             ignore=shutil.ignore_patterns("*.map", "*.esm.js", "*.scss"))
    copy(_package_dir("jupyter_server_mathjax", "static"), out / "mathjax")
    if slides:  # reveal.js as the pinned sphinx-revealjs ships it
        reveal = _package_dir("sphinx_revealjs", "_static", "revealjs")
        for part in ("dist", "plugin/notes"):
            copy(reveal / part, out / "reveal.js" / part)
        shutil.copy2(reveal / "LICENSE", out / "reveal.js" / "LICENSE")
    return {"mathjax": "mathjax/MathJax.js" + MATHJAX_CONFIG, "reveal": "reveal.js"}


def hardware_of(nb) -> str:
    """What dx.hardware_report() printed: the first code cell after the set-up cell."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "setup" not in cell.metadata.get("tags", []):
            return "".join(output_texts(cell.get("outputs", []), results=False,
                                        errors=False)).strip()
    return ""


def was_executed(nb) -> bool:
    """True if any code cell has outputs or an execution count."""
    return any(c.get("outputs") or c.get("execution_count") for c in nb.cells)


def with_notes(nb) -> None:
    """Put each cell's speaker notes (metadata `notes`) on its slide, as reveal.js notes."""
    cells = []
    for cell in nb.cells:
        notes = cell.metadata.get("notes")
        cells += [cell] + ([nbformat.v4.new_markdown_cell(notes, metadata={
            "slideshow": {"slide_type": "notes"}})] if isinstance(notes, str) and notes.strip()
            else [])
    nb.cells = cells


def draws_at_top_level(source: str) -> bool:
    """True if running the code always draws: a plotting call outside any def, class or if."""
    try:
        tree = ast.parse(source.replace("%matplotlib inline", ""))
    except SyntaxError:
        return False
    skip = (ast.FunctionDef, ast.Lambda, ast.ClassDef, ast.If, ast.IfExp)
    todo = [n for n in tree.body if not isinstance(n, skip)]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Call) and _PLOT_CALL.match(ast.unparse(node.func)):
            return True
        todo += [n for n in ast.iter_child_nodes(node) if not isinstance(n, skip)]
    return False


def on_a_gpu_slide(stem: str, reference: Path = REFERENCE) -> list:
    """The notebook's "On a GPU" slide (reference/NN.md, its notes after `<!-- notes -->`)."""
    if not stem[:2].isdigit():  # not one of the chapter's notebooks (a test's, a copy)
        return []
    path = reference / f"{stem[:2]}.md"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: every notebook's deck shows its reference "
                                "GPU figures there (see docs/reference/on-a-gpu/README.md)")
    slide, _, notes = path.read_text(encoding="utf-8").partition("<!-- notes -->")
    return [nbformat.v4.new_markdown_cell(slide.strip(), metadata={
        "slideshow": {"slide_type": "slide"}, "notes": notes.strip()})]


def for_lecture(nb, stem: str, gpu: bool, reference: Path = REFERENCE) -> None:
    """Shape the cells for the decks (in place): Exercises out; on a CPU, the gpu-only cells
    out and one "On a GPU" slide where the first was (else before the last Quiz); tags set."""
    cells, skipping, first_gpu = [], False, None
    for cell in nb.cells:
        level = nbmeta.heading_level(cell)
        if level in (1, 2):
            skipping = nbmeta.heading_text(cell).startswith(NOT_IN_DECKS)
        tags = cell.metadata.setdefault("tags", [])
        if skipping:
            continue
        if GPU_ONLY in tags and not gpu:
            first_gpu = len(cells) if first_gpu is None else first_gpu
            continue
        if cell.cell_type == "code" and draws_at_top_level(hosted.source_text(cell)):
            tags += [DRAWS] + [HIDE_INPUT] * (SHOW_INPUT not in tags)
        cells.append(cell)
    if not gpu:
        if first_gpu is None:
            quiz = [i for i, c in enumerate(cells) if nbmeta.heading_text(c).startswith("Quiz")]
            first_gpu = quiz[-1] if quiz else len(cells)
        else:  # the first shown cell after the GPU cells opens a slide of its own
            after = next((c for c in cells[first_gpu:] if c.metadata.get(
                "slideshow", {}).get("slide_type") not in ("skip", "notes")), None)
            if after is not None and not nbmeta.starts_slide(after):
                after.metadata["slideshow"] = {"slide_type": "subslide"}
        cells[first_gpu:first_gpu] = on_a_gpu_slide(stem, reference)
    nb.cells = cells


def lecture_parts(nb) -> list[tuple[str, list]]:
    """The lecture parts as (title, cells): a `#` heading after the first cell starts one."""
    parts = [(hosted.title_of(nb), [])]
    for index, cell in enumerate(nb.cells):
        if index > 0 and nbmeta.heading_level(cell) == 1:
            parts.append((nbmeta.heading_text(cell), []))
        parts[-1][1].append(cell)
    return parts


def deck_name(stem: str, part: int) -> str:
    """A deck's file stem: the notebook's for its first part, `-partN` after it for the others."""
    return stem if part == 1 else f"{stem}-part{part}"


def _exporter(kind: str, urls: dict):
    from nbconvert import HTMLExporter, SlidesExporter
    # basedirs: where d2l_slides/ and d2l_page/ are found; paths: their shared d2l_*.j2 parts.
    common = dict(extra_template_basedirs=[str(TEMPLATES)], extra_template_paths=[str(TEMPLATES)],
                  mathjax_url=urls["mathjax"], exclude_input_prompt=False)
    if kind == "slides":
        from nbconvert.preprocessors import TagRemovePreprocessor
        # No In[ ]/Out[ ] prompts on a slide: their 120 px column would cut 80-character lines.
        common.update(exclude_input_prompt=True, exclude_output_prompt=True)
        # 1280x720: one slide pixel is one pixel of a 720p projector, so 20 px code is 20 px.
        exporter = SlidesExporter(template_name="d2l_slides", reveal_url_prefix=urls["reveal"],
                                  reveal_theme="white", reveal_number="c/t", reveal_width="1280",
                                  reveal_height="720", **common)
        exporter.register_preprocessor(TagRemovePreprocessor(
            remove_input_tags={HIDE_INPUT}), enabled=True)
        return exporter
    return HTMLExporter(template_name="d2l_page", **common)


def build(kind: str, notebooks: list[Path], out: Path, source_dir: Path,
          summary: Path | None = None) -> list[dict]:
    """Convert `notebooks` into `out` (slides or html); write index.html; return one row each."""
    if kind not in ("slides", "html"):
        raise ValueError(f"kind must be 'slides' or 'html', got {kind!r}")
    if not notebooks:
        raise FileNotFoundError("no notebooks to convert: run `make report` first, which "
                                "executes them into build/report/notebooks/")
    out.mkdir(parents=True, exist_ok=True)
    urls = copy_assets(out, slides=kind == "slides")
    exporter = _exporter(kind, urls)
    rows = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        if not was_executed(nb):
            print(f"warning: {path.name} has no outputs: it was not executed")
        if kind == "slides" and any("slideshow" not in c.metadata for c in nb.cells):
            # The stored notebook should carry them (tests check it); cut slides all the same.
            print(f"notice: {path.name} has cells without slide metadata; "
                  f"run python tools/nbmeta.py notebooks/{path.name}")
            nb = nbformat.from_dict(nbmeta.apply(nb))
        # The launch badges load from the platforms' sites; the pages work offline without them.
        nb.cells = [c for c in nb.cells if "launch" not in c.metadata.get("tags", [])]
        for cell in nb.cells:  # a figure still linked as ../images/NAME.png is embedded
            if cell.cell_type == "markdown":
                hosted.embed_figures(cell, source_dir.parent / "images")
        hardware, executed = hardware_of(nb), was_executed(nb)
        # A page shows the whole notebook; a deck is cut per lecture part, with its notes.
        if kind == "slides":
            for_lecture(nb, path.stem, gpu=bool(re.search(r"^cuda:\d", hardware, re.M)))
            with_notes(nb)
        parts = lecture_parts(nb) if kind == "slides" else [(hosted.title_of(nb), nb.cells)]
        for number, (title, cells) in enumerate(parts, 1):
            part = nbformat.from_dict({**nb, "cells": cells})
            body, _ = exporter.from_notebook_node(part, resources={
                "metadata": {"name": title or path.stem, "path": str(source_dir)}})
            stem = deck_name(path.stem, number)
            target = out / (stem + (".slides.html" if kind == "slides" else ".html"))
            target.write_text(body, encoding="utf-8")
            rows.append({"file": target.name, "notebook": path.name, "title": title,
                         "hardware": hardware, "executed": executed,
                         "slides": sum(map(nbmeta.starts_slide, cells))})
    write_index(out, kind, rows, summary)
    return rows


def read_summary(summary: Path | None) -> dict:
    """`make report`'s summary.json (tools/report.py), or {} where there is none."""
    try:
        data = json.loads(summary.read_text(encoding="utf-8")) if summary else {}
    except FileNotFoundError:
        return {}
    except ValueError:
        print(f"warning: {summary} is not valid JSON; the index leaves the run summary out")
        return {}
    return data if isinstance(data, dict) else {}


def describe_hardware(hw) -> str:
    """One line per part of a dx.hardware_report(verbose=False) dictionary, as it prints them."""
    if not isinstance(hw, dict):
        return str(hw or "")
    from d2l_extras.hardware import hardware_rows
    return "\n".join(f"{label}: {text}" for label, text in hardware_rows(hw))


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def write_index(out: Path, kind: str, rows: list[dict], summary: Path | None) -> Path:
    """index.html: every notebook, its link, how its run went, and the hardware it ran on."""
    import jinja2  # nbconvert's; autoescape: notebook titles and errors are text, not HTML
    report = read_summary(summary)
    # tools/report.py names a notebook by its stem ("01-compilers-and-interpreters").
    runs = {Path(str(run.get("notebook"))).stem: run for run in report.get("notebooks", [])
            if isinstance(run, dict)}
    for row in rows:
        run = runs.get(Path(row["notebook"]).stem, {})
        row["status"] = ("" if not run else f" FAILED: {run['error']}" if run.get("error")
                         else f" ran in {run.get('seconds', 0):.1f} s")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    body = env.get_template("d2l_index.html.j2").render(
        what="slides" if kind == "slides" else "pages", report=report,
        machine=describe_hardware(report.get("hardware")), rows=rows,
        load=_capital(report_tool.describe_load(report.get("machine_load"))))
    (out / "index.html").write_text(body + "\n", encoding="utf-8")
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=["slides", "html"])
    parser.add_argument("--notebooks", type=Path, default=ROOT / "build/report/notebooks")
    parser.add_argument("--out", type=Path, help="default: build/KIND")
    parser.add_argument("--source", type=Path, default=ROOT / "notebooks", help="stored ones")
    parser.add_argument("--summary", type=Path, help="make report's summary.json")
    args = parser.parse_args(argv)
    out = args.out or ROOT / "build" / args.kind
    notebooks = sorted(args.notebooks.glob("*.ipynb")) if args.notebooks.is_dir() else []
    rows = build(args.kind, notebooks, out, args.source, args.summary)
    print(f"{len(rows)} {args.kind} written to {out}/ (open {out / 'index.html'})")
    # The decks show that run's numbers: say how busy the machine was while it ran.
    print(report_tool.describe_load(read_summary(args.summary).get("machine_load")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
