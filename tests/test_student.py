"""make student (tools/student.py): every worked solution removed, and the notebook still runs."""
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_slides import ANSWER_IN_WORDS, SOLUTION, code, md, notebook  # noqa: E402
from tools import nbmeta, report, student  # noqa: E402


def test_a_region_becomes_its_stub_and_the_rest_stays():
    src = "# @title Exercise 1: x\nx = ...\n# BEGIN SOLUTION\nx = 2\n# END SOLUTION\nprint(x)"
    assert student.strip_source(src, code=True) == \
        "# @title Exercise 1: x\nx = ...\n# your code here\nprint(x)"
    indented = "for i in range(2):\n    # BEGIN SOLUTION\n    x = i\n    # END SOLUTION"
    stripped = student.strip_source(indented, code=True)
    assert stripped == "for i in range(2):\n    ...  # your code here"
    compile(stripped, "stub", "exec")
    words = "**Exercise 1.**\n<!-- BEGIN SOLUTION -->\nBecause.\n<!-- END SOLUTION -->"
    assert student.strip_source(words, code=False) == "**Exercise 1.**\n*Your answer here.*"


@pytest.mark.parametrize("bad,why", [
    ("# BEGIN SOLUTION\nx = 1", "line 1: BEGIN SOLUTION has no END SOLUTION"),
    ("x = 1\n# END SOLUTION", "line 2: END SOLUTION without a BEGIN SOLUTION"),
    ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION", "line 2: BEGIN SOLUTION inside"),
])
def test_a_broken_region_is_refused_with_its_line(bad, why):
    with pytest.raises(ValueError, match=why):
        student.strip_source(bad, code=True)


def demo():
    nb = notebook([
        md("# Demo"),
        code("import d2l_extras as dx"),
        md("## Exercises\n\n1. Add one to one."),
        code(f"# @title Exercise 1: add\nanswer = ...\n# BEGIN SOLUTION\n{SOLUTION}\n"
             "# END SOLUTION", [{"output_type": "stream", "name": "stdout", "text": "2\n"}]),
        md(f"**Exercise 1.**\n<!-- BEGIN SOLUTION -->\n{ANSWER_IN_WORDS}\n"
           "<!-- END SOLUTION -->"),
        code("dx.check('Exercise 1', answer, 2)"),
    ])
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"cell-{i}"
    return nbmeta.apply(nb)


def test_the_student_version_has_no_solution_and_opens_expanded():
    nb = demo()
    out = student.student_version(nb)
    text = json.dumps(out)
    assert SOLUTION not in text and ANSWER_IN_WORDS not in text
    assert "BEGIN SOLUTION" not in text and out["cells"][3]["outputs"] == []
    assert "jupyter" not in out["cells"][3]["metadata"]
    assert out["cells"][3]["metadata"]["nbgrader"]["solution"] is True  # nbgrader still reads it
    assert SOLUTION in json.dumps(nb), "the original is left as it was"


def test_write_and_the_command_line(tmp_path, capsys):
    path = tmp_path / "demo.ipynb"
    path.write_text(json.dumps(demo()), encoding="utf-8")
    assert student.main([str(path), "--out", str(tmp_path / "out")]) == 0
    written = tmp_path / "out" / "notebooks" / "demo.ipynb"
    assert SOLUTION not in written.read_text(encoding="utf-8")
    assert "1 student notebooks written" in capsys.readouterr().out
    nb = demo()
    nb["cells"][3]["source"] = "# BEGIN SOLUTION\nx = 1"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert student.main([str(path), "--out", str(tmp_path / "out")]) == 2
    assert "demo.ipynb: cell 3: line 1: BEGIN SOLUTION has no END" in capsys.readouterr().err


def test_a_student_version_runs_and_says_not_answered_yet(tmp_path):
    path = tmp_path / "demo.ipynb"
    path.write_text(json.dumps(demo()), encoding="utf-8")
    [written] = student.write([path], tmp_path / "student")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    error = report.execute_notebook(written, tmp_path / "ran.ipynb", env, cell_timeout=120)
    assert error is None, error
    ran = json.loads((tmp_path / "ran.ipynb").read_text(encoding="utf-8"))
    said = "".join("".join(o.get("text", "")) for o in ran["cells"][-1]["outputs"])
    assert said.strip() == "Exercise 1: not answered yet: replace the ... above with your answer"
