"""Run a notebook's defining cells outside Jupyter, so a test can check what a lesson defines.

A notebook writes the algorithm it teaches (allreduce, the ring, a bandwidth measurement) in its
own cells; the tested twin lives in d2l_extras. Rather than assert the two agree inside the
lesson, a test asks for the names it needs:

    ns = notebook_namespace("06-multiple-gpus-from-scratch", ["allreduce", "split_batch"])
    ns["allreduce"](...)

This runs, in notebook order, every cell made only of imports and every cell that defines one of
the names (a top-level def, class or assignment), and nothing else: no measurement, no plot.
"""
from __future__ import annotations

import ast
import json
import sys
import types
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def notebook_path(name: str) -> Path:
    """notebooks/NAME.ipynb from its stem or a prefix such as '06'."""
    matches = sorted(NOTEBOOKS.glob(f"{name}*.ipynb"))
    if not matches:
        raise FileNotFoundError(f"no notebook under {NOTEBOOKS} starts with {name!r}")
    return matches[0]


def _defined(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _only_imports(tree: ast.Module) -> bool:
    # `pass` stands where a magic was (%matplotlib inline): it does not make a cell do work.
    body = [n for n in tree.body if not isinstance(n, ast.Pass)]
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in body)


def defining_cells(name: str, names: list[str]) -> list[str]:
    """The sources of the import-only cells and the cells that define `names`, in order."""
    cells = json.loads(notebook_path(name).read_text(encoding="utf-8"))["cells"]
    wanted, found, sources = set(names), set(), []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        # IPython magics (%matplotlib inline, %pip) are not Python: `pass` in their place.
        lines = cell["source"]
        lines = lines.splitlines(keepends=True) if isinstance(lines, str) else lines
        source = "".join(line[:len(line) - len(line.lstrip())] + "pass\n"
                         if line.lstrip().startswith("%") else line for line in lines)
        tree = ast.parse(source)
        defined = _defined(tree) & wanted
        if defined or _only_imports(tree):
            sources.append(source)
            found |= defined
    missing = wanted - found
    if missing:
        raise KeyError(f"{name}: no cell defines {sorted(missing)}")
    return sources


def cell_source(name: str, cell_id: str) -> str:
    """The source of notebook `name`'s code cell `cell_id`, for a test to run with fakes."""
    for cell in json.loads(notebook_path(name).read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code" and cell.get("id") == cell_id:
            return "".join(cell["source"])
    raise KeyError(f"{name}: no code cell with id {cell_id!r}")


def notebook_namespace(name: str, names: list[str]) -> dict:
    """Execute the defining cells of notebook `name` (see the module docstring); return globals."""
    import d2l_extras
    # `dx` comes from the cell that prints the hardware report: not run here.
    # A real module, registered: torch.compile (2.6) imports the module its code runs in.
    module = types.ModuleType("__notebook__")
    sys.modules[module.__name__] = module
    namespace: dict = module.__dict__
    namespace["dx"] = d2l_extras
    import matplotlib
    with matplotlib.rc_context():  # the notebook's slide style stays with its cells
        for source in defining_cells(name, names):
            exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace
