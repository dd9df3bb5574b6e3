"""Argument checks: each names the argument and says what it must be."""
import argparse
from functools import partial

import numpy as np
import pytest

from d2l_extras.checks import COUNT, WHOLE, option, positive_number, whole_number


@pytest.mark.parametrize("value", [1, 7, np.int64(3)])
def test_whole_number_accepts_counts(value):
    assert whole_number(value, "k") == int(value)


@pytest.mark.parametrize("bad", [0, -2, 2.0, "3", None, True])
def test_whole_number_names_what_was_wrong(bad):
    with pytest.raises(ValueError, match="k must be a whole number >= 1"):
        whole_number(bad, "k")


def test_whole_number_takes_a_minimum():
    assert whole_number(0, "gpus", minimum=0) == 0
    with pytest.raises(ValueError, match=r"gpus must be a whole number >= 0, got -1"):
        whole_number(-1, "gpus", minimum=0)
    with pytest.raises(ValueError, match=r"n must be a whole number >= 1, got 0"):
        whole_number(0, "n")


def test_positive_number_refuses_what_cannot_be_measured():
    assert positive_number(3, "size") == 3.0
    for bad in (0, -1.5, float("nan"), float("inf"), True, "3", None):
        with pytest.raises(ValueError, match="size must be a finite number > 0"):
            positive_number(bad, "size")


def test_option_reads_the_text_then_checks_it_for_argparse():
    assert option(whole_number, int)("3") == 3 and option(positive_number)("0.5") == 0.5
    count = option(partial(whole_number, minimum=0), int)
    assert count("0") == 0
    for parse, text, bound in ((option(whole_number, int), "0", ">= 1"),
                               (count, "-1", ">= 0"), (option(positive_number), "0", "> 0"),
                               (option(whole_number, int), "2.5", "base 10")):
        with pytest.raises(argparse.ArgumentTypeError, match=bound):
            parse(text)


def test_whole_and_count_are_the_workers_whole_number_options():
    assert WHOLE("3") == 3 and COUNT("0") == 0
    for parse, text, bound in ((WHOLE, "0", ">= 1"), (COUNT, "-1", ">= 0"),
                               (COUNT, "x", "base 10")):
        with pytest.raises(argparse.ArgumentTypeError, match=bound):
            parse(text)
