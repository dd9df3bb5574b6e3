import time

import pytest
import torch

import d2l_extras as dx
from d2l_extras import timing


def test_benchmark_keeps_elapsed_and_prints(capsys):
    with dx.Benchmark("sleep") as b:
        time.sleep(0.02)
    assert 0.015 < b.elapsed < 1
    assert capsys.readouterr().out.startswith("sleep: ")


def test_benchmark_synchronizes_before_both_clock_reads(monkeypatch):
    calls = []
    monkeypatch.setattr(timing, "synchronize", lambda devices: calls.append(devices))
    with dx.Benchmark(devices=["cpu"], verbose=False):
        assert len(calls) == 1
    assert len(calls) == 2


def test_measure_separates_cold_from_warm():
    state = {"first": True}

    def work():
        time.sleep(0.05 if state.pop("first", False) else 0.001)

    m = dx.Benchmark.measure(work, "work", repeats=5, number=3)
    assert m.name == "work" and len(m.warm) == 5
    assert m.cold >= 0.05 > 0.01 > m.median
    assert "first call" in str(m) and "median of 5" in str(m)


def test_measure_counts_calls():
    count = []
    dx.Benchmark.measure(lambda: count.append(1), repeats=4, number=3)
    assert len(count) == 1 + 4 * 3


@pytest.mark.parametrize("kwargs", [dict(repeats=0), dict(number=0)])
def test_measure_rejects_bad_counts(kwargs):
    with pytest.raises(ValueError, match="repeats >= 1 and number >= 1"):
        dx.Benchmark.measure(lambda: None, **kwargs)


def test_measure_rejects_non_callable():
    with pytest.raises(TypeError, match="function to call"):
        dx.Benchmark.measure(42)


def test_synchronize_accepts_cpu_and_default():
    dx.synchronize(["cpu", torch.device("cpu")])
    dx.synchronize()


@pytest.mark.parametrize("seconds, text", [(2.5, "2.5 s"), (0.0123, "12.3 ms"),
                                           (3.8e-5, "38 us"), (5e-9, "5 ns")])
def test_format_seconds(seconds, text):
    assert dx.format_seconds(seconds) == text
