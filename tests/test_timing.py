import time

import pytest
import torch

import d2l_extras as dx
from d2l_extras import timing


class ScriptedClock:
    """A clock that returns the given readings in order: timings with no real waiting."""

    def __init__(self, readings):
        self.readings = list(readings)

    def __call__(self):
        return self.readings.pop(0)


def test_benchmark_keeps_elapsed_and_prints(capsys):
    with dx.Benchmark("block", clock=ScriptedClock([10.0, 10.25])) as b:
        pass
    assert b.elapsed == 0.25
    assert capsys.readouterr().out == "block: 250 ms\n"


def test_benchmark_times_real_work_with_the_default_clock():
    # Wall-clock sanity only: sleeping 20 ms cannot take less than that (load only adds time).
    with dx.Benchmark(verbose=False) as b:
        time.sleep(0.02)
    assert b.elapsed >= 0.015


def test_benchmark_synchronizes_before_both_clock_reads(monkeypatch):
    calls = []
    monkeypatch.setattr(timing, "synchronize", lambda devices: calls.append(devices))
    with dx.Benchmark(devices=["cpu"], verbose=False):
        assert len(calls) == 1
    assert len(calls) == 2


def test_measure_separates_cold_from_warm():
    # Clock reads in pairs: the first call takes 5 s (compiling), then repeats of 3 calls take
    # 3, 6, 30 (a disturbed one), 3 and 4.5 s: per call 1, 2, 10, 1, 1.5; the median is 1.5.
    readings = [0, 5]
    for spent in (3, 6, 30, 3, 4.5):
        readings += [100, 100 + spent]
    m = dx.Benchmark.measure(lambda: None, "work", repeats=5, number=3,
                             clock=ScriptedClock(readings))
    assert m.name == "work" and m.cold == 5
    assert m.warm == [1, 2, 10, 1, 1.5] and m.median == 1.5
    assert str(m) == "work: first call 5 s, then 1.5 s per call (median of 5)"


class ReduceOverhead:
    """A fake torch.compile(mode="reduce-overhead") model on a fake clock: the first call
    compiles (5 s), the second records the CUDA graph (0.5 s), later calls replay it (1 ms)."""

    def __init__(self):
        self.now, self.calls = 0.0, 0

    def clock(self):
        return self.now

    def __call__(self):
        self.calls += 1
        self.now += {1: 5.0, 2: 0.5}.get(self.calls, 0.001)


def test_measure_times_setup_calls_apart():
    model = ReduceOverhead()
    m = dx.Benchmark.measure(model, "reduce-overhead", repeats=3, number=2,
                             clock=model.clock, setup=1)
    assert m.cold == 5.0 and m.setup == [0.5] and model.calls == 1 + 1 + 3 * 2
    assert m.warm == pytest.approx([0.001] * 3)  # replays only: the capture is not in them
    assert str(m) == ("reduce-overhead: first call 5 s, then 500 ms (call 2), then 1 ms per call "
                      "(median of 3)")


def test_without_setup_the_capture_lands_in_the_first_warm_run():
    # Why the option exists: the second call is billed to the first warm repeat.
    model = ReduceOverhead()
    m = dx.Benchmark.measure(model, repeats=3, number=2, clock=model.clock)
    assert m.setup == [] and m.warm[0] == pytest.approx((0.5 + 0.001) / 2)


@pytest.mark.parametrize("setup", [-1, 1.5, True, "1"])
def test_measure_rejects_bad_setup(setup):
    with pytest.raises(ValueError, match="setup"):
        dx.Benchmark.measure(lambda: None, setup=setup)


def test_tick_clock_advances_one_step_per_read():
    clock = dx.TickClock(0.5)
    assert [clock(), clock(), clock()] == [0.5, 1.0, 1.5] and clock.reads == 3
    with pytest.raises(ValueError, match="step > 0"):
        dx.TickClock(0)


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
