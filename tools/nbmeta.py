"""Set the metadata every notebook carries: the project's kernel and the slide of every cell.

    python tools/nbmeta.py notebooks/*.ipynb          # rewrite the notebooks in place
    python tools/nbmeta.py --check notebooks/*.ipynb  # exit 1 and list what would change

Slides (`make slides`, RISE): a `#`/`##` heading starts a slide; a `###` heading, a plot (and the
cell after it), a cell that would overfill the slide or prose past WORDS words starts a sub-slide;
cells tagged `no-slide`, worked solutions' code and the `dx.check` cells are skipped; a worked
solution in Markdown becomes speaker notes. A worked solution (a `BEGIN SOLUTION` ... `END
SOLUTION` region, nbgrader's markers) gets nbgrader's metadata and is collapsed. Also adds what a
notebook needs to run alone on a hosted platform (tools/hosted.py). Writes nbformat's layout.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

if not __package__:  # run as a script (python tools/nbmeta.py): import tools from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import gpusupport, hosted  # noqa: E402

# The generic kernel: Colab, Kaggle and Studio Lab know no other name (Colab says "Unrecognized
# runtime" and JupyterLab asks for a kernel), and Jupyter started from .venv (make lab) or from
# an activated environment runs its own Python under this name.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

# A slide is 1280x720 px with 21 px code (tools/nbsite.py's template): about 20 lines fit, of
# which at most 15 of code (a minute's explaining); a stack holds at most 6 slides, then the
# next sub-slide starts a column of its own.
SLIDE_LINES = 20
CODE_LINES = 15
STACK = 6
WRAP = 100            # characters per line before a long line wraps on a slide
OUTPUT_LINES = 3      # allowance for what a code cell prints (the stored notebook has no outputs)
FIGURE_LINES = 16     # a picture: at most 600 px of the 720 px slide
_FIGURE_IN_MARKDOWN = re.compile(r"!\[[^\]]*\]\(|<img\b", re.I)
# Code that draws: matplotlib calls and the d2l_extras plotting helpers (bar_chart, plot_*).
_FIGURE_IN_CODE = re.compile(r"\b(plt\.\w+|bar_chart|plot_\w+|Animator)\s*\(")
_DATA_URI = re.compile(r"data:[^)\s]*\)")
_HEADING = re.compile(r"(#{1,6})\s")
NO_SLIDE = hosted.NO_SLIDE  # the cell tag that keeps a cell out of the decks
WORDS = 120           # words of prose on one slide, at most
# The region markers of a worked solution, as nbgrader and otter-grader write them.
BEGIN = re.compile(r"^\s*(#+|<!--)\s*BEGIN SOLUTION\b")
END = re.compile(r"^\s*(#+|<!--)\s*END SOLUTION\b")
_CHECK = re.compile(r"\bdx\.check\s*\(")
_COMMENT = re.compile(r"<!--.*?-->", re.S)


def heading_level(cell: dict) -> int:
    """Level of the Markdown heading a cell starts with (1 for `#`), 0 if none."""
    text = hosted.source_text(cell).lstrip("\n ") if cell.get("cell_type") == "markdown" else ""
    match = _HEADING.match(text)
    return len(match.group(1)) if match else 0


def heading_text(cell: dict) -> str:
    """The words of the heading a Markdown cell starts with, '' if it starts with none."""
    if not heading_level(cell):
        return ""
    return hosted.source_text(cell).strip().splitlines()[0].lstrip("#").strip()


def starts_slide(cell: dict) -> bool:
    """True if the cell's stored slide type opens a slide or a sub-slide."""
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type") in ("slide", "subslide")


def cell_lines(cell: dict) -> int:
    """Lines a cell takes on a slide, estimated from its source alone."""
    # A figure embedded as a data URI is one picture, however long its text.
    src = _DATA_URI.sub("data:)", hosted.source_text(cell))
    lines = sum(max(1, math.ceil(len(line) / WRAP)) for line in src.splitlines())
    if cell.get("cell_type") == "markdown":
        return lines + FIGURE_LINES * len(_FIGURE_IN_MARKDOWN.findall(src))
    if cell.get("cell_type") == "code":
        return lines + OUTPUT_LINES + (FIGURE_LINES if _FIGURE_IN_CODE.search(src) else 0)
    return lines


def source_lines(cell: dict) -> int:
    """Lines of code a code cell shows (0 for Markdown)."""
    return len(hosted.source_text(cell).splitlines()) if cell.get("cell_type") == "code" else 0


def hidden(cell: dict) -> bool:
    """True if the cell is tagged to stay out of the decks (`no-slide`)."""
    return NO_SLIDE in cell.get("metadata", {}).get("tags", [])


def is_solution(cell: dict) -> bool:
    """True if the cell holds a worked solution (a BEGIN SOLUTION region)."""
    return any(BEGIN.match(line) for line in hosted.source_text(cell).splitlines())


def is_check(cell: dict) -> bool:
    """True if a code cell checks an exercise's answer (calls dx.check)."""
    return cell.get("cell_type") == "code" and bool(_CHECK.search(hosted.source_text(cell)))


def prose_words(cell: dict) -> int:
    """Words of prose a Markdown cell shows (figures' data and HTML comments left out)."""
    if cell.get("cell_type") != "markdown":
        return 0
    return len(_COMMENT.sub(" ", _DATA_URI.sub(" ", hosted.source_text(cell))).split())


def draws(cell: dict) -> bool:
    """True if a code cell draws a plot (matplotlib or a d2l_extras/d2l plotting helper)."""
    return cell.get("cell_type") == "code" and bool(
        _FIGURE_IN_CODE.search(hosted.source_text(cell)))


def slide_types(cells: list[dict]) -> list[str]:
    """The slideshow `slide_type` of every cell (see the module docstring for the rules)."""
    types, used, words, code, stack, after_plot = [], 0, 0, 0, 0, False
    for i, cell in enumerate(cells):
        solution = is_solution(cell)
        if i > 0 and (hidden(cell) or is_check(cell) or solution):
            notes = solution and cell.get("cell_type") == "markdown"
            types.append("notes" if notes else "skip")
            continue
        height, level, prose = cell_lines(cell), heading_level(cell), prose_words(cell)
        if i == 0 or level in (1, 2):
            kind = "slide"
        elif (level >= 3 or draws(cell) or after_plot or used + height > SLIDE_LINES
              or words + prose > WORDS or code + source_lines(cell) > CODE_LINES):
            kind = "subslide" if stack < STACK - 1 else "slide"
        else:
            kind = "-"
        stack = 0 if kind == "slide" else stack + (kind == "subslide")
        used = height if kind != "-" else used + height
        words = prose if kind != "-" else words + prose
        code = source_lines(cell) if kind != "-" else code + source_lines(cell)
        after_plot = draws(cell)
        types.append(kind)
    return types


def apply(nb: dict, path: str | None = None) -> dict:
    """Set the kernel and every cell's slide type in a notebook dict (in place); return it; with
    `path` (notebooks/01-x.ipynb), also what it needs on a hosted platform (tools/hosted.py)."""
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("not a notebook: expected a JSON object with a 'cells' list")
    if path is not None:
        hosted.apply(nb, path)
    nb.setdefault("metadata", {})["kernelspec"] = dict(KERNELSPEC)
    number = 0
    for cell, kind in zip(nb["cells"], slide_types(nb["cells"])):
        meta = cell.setdefault("metadata", {})
        meta["slideshow"] = {"slide_type": kind}
        if is_solution(cell):
            number += 1
            mark_solution(meta, cell.get("cell_type") == "code", number)
        else:  # a cell that no longer holds a solution opens as any other
            for key in ("jupyter", "cellView", "nbgrader"):
                meta.pop(key, None)
    return nb


def mark_solution(meta: dict, code: bool, number: int) -> None:
    """Collapse a worked solution and give it nbgrader's metadata (number: its order)."""
    # JupyterLab and Notebook 7 collapse the cell; Colab shows a code cell as a form (its
    # `# @title` line) until double-clicked.
    meta["jupyter"] = {"outputs_hidden": True, "source_hidden": True}
    if code:
        meta["cellView"] = "form"
    meta["nbgrader"] = {"grade": False, "grade_id": f"solution-{number}", "locked": False,
                        "schema_version": 3, "solution": True, "task": False}


def rewrite(text: str, path: str | None = None) -> str:
    """The notebook `text` with the metadata set, in nbformat's layout (as Jupyter saves it)."""
    return json.dumps(apply(json.loads(text), path), indent=1, sort_keys=True,
                      ensure_ascii=False) + "\n"


def repo_path(path: Path) -> str | None:
    """A notebook's path in the repository (badges and set-up cell), None for a copy elsewhere."""
    try:
        return path.resolve().relative_to(hosted.ROOT).as_posix()
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> int:
    """Command line: set (or with --check, only verify) the metadata of the given notebooks."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    changes = [(p, rewrite(p.read_text(encoding="utf-8"), repo_path(p))) for p in args.notebooks]
    readme = hosted.ROOT / "README.md"
    if any(repo_path(p) for p in args.notebooks) and readme.is_file():
        # The README's launch badges and GPU-support table, from the same sources.
        text = hosted.update_readme(readme.read_text(encoding="utf-8"),
                                    sorted((hosted.ROOT / "notebooks").glob("*.ipynb")))
        changes.append((readme, gpusupport.update_readme(text)))
    stale = [(p, new) for p, new in changes if new != p.read_text(encoding="utf-8")]
    for path, new in stale if not args.check else []:
        path.write_text(new, encoding="utf-8", newline="")  # the line ends json.dumps wrote
    stale = [p for p, _ in stale]
    verb = "out of date" if args.check else "updated"
    for path in stale:
        print(f"{verb}: {path}")
    if args.check and stale:
        print(f"run: python tools/nbmeta.py {' '.join(str(p) for p in stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
