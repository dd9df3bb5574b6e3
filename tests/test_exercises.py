"""dx.check: one line per answer, right, not yet (with a hint) or not answered yet."""
import d2l_extras as dx
from tools.alarms import alarm_lines


def said(capsys):
    return capsys.readouterr().out.strip()


def verdict(capsys, *args, **kwargs):
    """What dx.check printed, after the word for the exercise."""
    assert dx.check(*args, **kwargs) is None  # a cell ending with it shows the line alone
    return said(capsys).split(": ", 1)[1]


def test_a_right_answer_says_so(capsys):
    dx.check("Exercise 1", 42, 42)
    assert said(capsys) == "Exercise 1: right"
    assert verdict(capsys, "Exercise 2", 0.1 + 0.2, 0.3) == "right"  # numbers within rel
    assert verdict(capsys, "Exercise 3", 7, lambda n: n % 7 == 0) == "right"
    assert verdict(capsys, "Exercise 4", "gloo", "gloo") == "right"


def test_a_wrong_answer_gets_one_line_with_its_hint(capsys):
    dx.check("Exercise 1", 41, 42, hint="count the bytes twice")
    assert said(capsys) == "Exercise 1: not yet: count the bytes twice"
    dx.check("Exercise 2", 1.1, 1.0, rel=0.05)
    assert said(capsys) == "Exercise 2: not yet"
    assert verdict(capsys, "Exercise 2", 1.04, 1.0, rel=0.05) == "right"
    assert verdict(capsys, "Exercise 5", True, 1) == "not yet"  # a bool is not a count


def test_the_placeholder_is_not_answered_yet(capsys):
    dx.check("Exercise 3", ..., 3)
    assert said(capsys) == "Exercise 3: not answered yet: replace the ... above with your answer"


def test_an_answer_the_check_cannot_read_is_wrong_not_a_traceback(capsys):
    dx.check("Exercise 4", "ten", lambda n: n > 5)
    line = said(capsys)
    assert line.startswith("Exercise 4: not yet: checking it raised TypeError")
    assert "\n" not in line


def test_a_failing_worked_solution_fails_nbval(capsys):
    dx.check("Exercise 2", 1, 2)
    outputs = [{"output_type": "stream", "name": "stdout", "text": capsys.readouterr().out}]
    assert [name for name, _ in alarm_lines(outputs)] == ["exercise-check"]
    dx.check("Exercise 2", 2, 2)
    dx.check("Exercise 2", ..., 2)
    outputs = [{"output_type": "stream", "name": "stdout", "text": capsys.readouterr().out}]
    assert alarm_lines(outputs) == []
