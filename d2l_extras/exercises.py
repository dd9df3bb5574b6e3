"""Exercises: a one-line check that tells a student whether an answer is right, not yet right
(with a hint) or not answered yet (the student version's `...`), never with a traceback."""
import math
import numbers
from typing import Any, Callable

# The first word of each verdict: tools/alarms.py fails an nbval run whose worked solution
# prints WRONG, so a solution that stops passing its own check cannot go unnoticed.
RIGHT, WRONG, OPEN = "right", "not yet", "not answered yet"


def _passes(answer: Any, expected: Any, rel: float) -> bool:
    """True if `answer` meets `expected`: a predicate, a number within `rel`, or an equal value."""
    if callable(expected):
        return bool(expected(answer))
    if isinstance(answer, bool) != isinstance(expected, bool):
        return False  # True is not the count 1, nor 0 a "no"
    if isinstance(answer, numbers.Real) and isinstance(expected, numbers.Real):
        return math.isclose(float(answer), float(expected), rel_tol=rel, abs_tol=0.0)
    return bool(answer == expected)


def check(label: str, answer: Any, expected: Any | Callable[[Any], bool], *,
          rel: float = 1e-6, hint: str = "") -> None:
    """Print one line: does `answer` meet `expected` (a value, within `rel`, or a predicate)?"""
    # A predicate that raises is a wrong answer with its reason. None returned: a cell ending
    # with the call shows the line alone.
    if answer is Ellipsis:
        print(f"{label}: {OPEN}: replace the ... above with your answer")
        return
    try:
        ok = _passes(answer, expected, rel)
    except Exception as err:  # the student's answer has the wrong type or shape
        ok, hint = False, f"checking it raised {type(err).__name__}: {err}"[:160]
    print(f"{label}: {RIGHT}" if ok else f"{label}: {WRONG}" + (f": {hint}" if hint else ""))
