"""One source for every taught function (issue 46): the notebook cell, generated into d2l_extras.

`make lib` (tools/save.py) writes the `#@save` code of the notebooks into generated modules. These
tests fail when a generated module is out of step with its notebooks, when generated code uses a
name it does not define or import, and when a function or class is written both in a notebook and
by hand in d2l_extras.
"""
import ast
import builtins
import importlib
import json
import symtable
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from tools import save  # noqa: E402

import d2l_extras as dx  # noqa: E402
from d2l_extras import _saved  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
GENERATED = save.generated()
HAND_WRITTEN = [p for p in sorted((ROOT / "d2l_extras").glob("*.py"))
                if p not in GENERATED and p.name != "__init__.py"]


def code(*sources):
    return [{"cell_type": "code", "metadata": {}, "source": s} for s in sources]


def definitions(tree):
    return {n.name for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def test_generated_modules_are_in_step_with_the_notebooks():
    assert save.main(["--check"]) == 0, "run `make lib` and commit what it writes"


def test_a_cell_mark_saves_the_cell_and_a_line_mark_one_definition():
    cells = code("#@save\nimport torch\nX = 1\ndef f():\n    return torch.ones(X)",
                 "def g(x):  #@save ring\n    return x\n\ny = g(2)",
                 "@staticmethod\ndef h():  #@save\n    pass\ndef k():\n    pass",
                 "%time z = 1\ndef not_saved():\n    pass")
    assert save.saved_blocks(cells) == [
        ("lessons", "import torch\nX = 1\ndef f():\n    return torch.ones(X)"),
        ("ring", "def g(x):  #@save ring\n    return x"),
        ("lessons", "@staticmethod\ndef h():  #@save\n    pass")]
    assert save.public_names("X = 1\n_y = 2\ndef f(): pass\nclass C: pass") == ["X", "f", "C"]


def test_a_module_gets_the_imports_it_uses_and_runs_main(tmp_path):
    nb = tmp_path / "01-x.ipynb"
    nb.write_text(json.dumps({"cells": code(
        "import os\nimport torch.distributed as dist\nfrom math import pi",
        "#@save job\ndef main():\n    dist.barrier()\n    return pi")}))
    text = save.render([nb])[save.PACKAGE / "job.py"]
    assert "import torch.distributed as dist" in text and "from math import pi" in text
    assert "import os" not in text
    assert text.rstrip().endswith('if __name__ == "__main__":\n    main()')
    assert "notebooks/01-x.ipynb" in text.splitlines()[3]
    assert "'main'" not in save.render([nb])[save.INDEX]  # a job's entry point, not a dx name


def test_one_name_saved_into_two_modules_is_an_error(tmp_path):
    nb = tmp_path / "01-x.ipynb"
    nb.write_text(json.dumps({"cells": code("def f():  #@save a\n    pass",
                                            "def f():  #@save b\n    pass")}))
    with pytest.raises(SystemExit, match="f is saved into both a and b"):
        save.render([nb])


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: p.name)
def test_generated_code_defines_or_imports_every_name(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith('"""') and save.MARK in text[:400]
    module = importlib.import_module(f"d2l_extras.{path.stem}")
    known = set(vars(module)) | set(dir(builtins))
    missing = set()
    for table in symtable.symtable(text, str(path), "exec").get_children():
        stack = [table]
        while stack:
            t = stack.pop()
            stack += t.get_children()
            missing |= {s.get_name() for s in t.get_symbols()
                        if s.is_global() and s.is_referenced() and s.get_name() not in known}
    assert not missing, f"{path.name} uses names it neither defines nor imports: {sorted(missing)}"


def test_dx_gives_every_saved_name_and_no_name_is_written_twice():
    for name, module in _saved.NAMES.items():
        assert getattr(dx, name) is getattr(importlib.import_module(f"d2l_extras.{module}"), name)
    by_hand = {}
    for path in HAND_WRITTEN:
        for name in definitions(ast.parse(path.read_text(encoding="utf-8"))):
            by_hand.setdefault(name, path.name)
    twice = []
    for path in NOTEBOOKS:
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "code":
                twice += [f"{path.name} cell {i}: {n} (also in d2l_extras/{by_hand[n]})"
                          for n in definitions(save._parse(save._source(cell)))
                          if n in by_hand and n != "main"]  # each torchrun job has a main
    assert not twice, "defined in a notebook and by hand: save the notebook's (#@save)\n" + \
        "\n".join(twice)
