"""make student: the notebooks as a student gets them, every worked solution removed.

    python -m tools.student [--out build/student] [--run] [notebooks/NN-name.ipynb ...]

A worked solution is a `BEGIN SOLUTION` ... `END SOLUTION` region (nbgrader's and otter's markers).
In code it becomes `# your code here` (`...` in an indented block) below the answer's declaration,
so the check says "not answered yet" and the notebook runs to the end; in Markdown, "*Your answer
here.*". The copies open expanded, without outputs. --run executes them; exit 1 if one fails.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from tools import nbmeta

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "build" / "student"
CODE_STUB, TEXT_STUB = "# your code here", "*Your answer here.*"


def strip_source(text: str, code: bool) -> str:
    """`text` with every solution region replaced by its stub; ValueError if a region is open."""
    out, inside, begun = [], False, 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if nbmeta.BEGIN.match(line):
            if inside:
                raise ValueError(f"line {number}: BEGIN SOLUTION inside a solution region")
            inside, begun = True, number
            indent = line[:len(line) - len(line.lstrip())]  # an indented block needs a statement
            out.append(indent + ("...  " * bool(indent) + CODE_STUB if code else TEXT_STUB) + "\n")
        elif nbmeta.END.match(line):
            if not inside:
                raise ValueError(f"line {number}: END SOLUTION without a BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"line {begun}: BEGIN SOLUTION has no END SOLUTION")
    return "".join(out).rstrip("\n")


def student_version(nb: dict) -> dict:
    """A copy of notebook `nb` without solutions, outputs or collapsed cells."""
    nb = copy.deepcopy(nb)
    for index, cell in enumerate(nb["cells"]):
        if nbmeta.is_solution(cell):
            code = cell["cell_type"] == "code"
            try:
                text = strip_source("".join(cell["source"]), code)
            except ValueError as err:
                raise ValueError(f"cell {index}: {err}") from None
            cell["source"] = text.splitlines(keepends=True)
            for key in ("jupyter", "cellView"):  # the stub opens expanded, to be filled in
                cell["metadata"].pop(key, None)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb


def write(paths: list[Path], out: Path) -> list[Path]:
    """Write the student version of each notebook into `out`; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        try:
            student = student_version(json.loads(path.read_text(encoding="utf-8")))
        except ValueError as err:
            raise ValueError(f"{path.name}: {err}") from None
        (out / path.name).write_text(json.dumps(student, indent=1, ensure_ascii=False,
                                                sort_keys=True) + "\n", encoding="utf-8")
    return [out / path.name for path in paths]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--run", action="store_true", help="execute them; exit 1 if one fails")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    try:
        written = write(paths, args.out / "notebooks")
    except ValueError as err:
        print(f"error: {err}; close every region with END SOLUTION", file=sys.stderr)
        return 2
    print(f"{len(written)} student notebooks written to {args.out / 'notebooks'}/")
    if not args.run:
        return 0
    from tools import report
    return report.report(written, args.out / "run")


if __name__ == "__main__":
    sys.exit(main())
