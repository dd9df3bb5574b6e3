"""Argument checks: a clear ValueError that names the argument and what it must be."""
import argparse
import math
import numbers
from typing import Callable


def whole_number(value: object, what: str, minimum: int = 1) -> int:
    """Return value as an int if it is a whole number >= minimum, else raise a ValueError."""
    # bool is an int subclass, but devices(True) is surely a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{what} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def positive_number(value: object, what: str) -> float:
    """Return value as a float if it is finite and > 0; else a ValueError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a finite number > 0, got {value!r}")
    return float(value)


def option(check: Callable[[object, str], object], kind: type = float) -> Callable[[str], object]:
    """An argparse type: the text read as `kind`, then `check`ed (e.g. whole_number)."""
    def parse(text: str) -> object:
        try:
            return check(kind(text), "the value")
        except ValueError as err:  # argparse shows this one's message, naming the option
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


# The argparse types of whole-number options: >= 1, and >= 0 (a count, 0: none).
WHOLE = option(whole_number, int)
COUNT = option(lambda value, what: whole_number(value, what, minimum=0), int)
