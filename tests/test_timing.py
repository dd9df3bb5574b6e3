import time
from types import SimpleNamespace

import pytest
import torch

import d2l_extras as dx
from clocks import TickClock
from d2l_extras import lessons, timing


class ScriptedClock:
    """A clock that returns the given readings in order: timings with no real waiting."""

    def __init__(self, readings):
        self.readings = list(readings)

    def __call__(self):
        return self.readings.pop(0)


def test_benchmark_keeps_elapsed_and_prints(monkeypatch, capsys):
    # dx.Benchmark is notebook 00's cell (#@save): its clock is time.perf_counter
    clock = ScriptedClock([10.0, 10.25, 11.0, 12.0])
    monkeypatch.setattr(lessons, "time", SimpleNamespace(perf_counter=clock))
    with dx.Benchmark("block") as b:
        pass
    assert b.elapsed == 0.25
    assert capsys.readouterr().out == "block: 250 ms\n"
    with pytest.raises(KeyError), dx.Benchmark():  # an error, not a time, is what went wrong
        raise KeyError("x")
    assert capsys.readouterr().out == ""


def test_benchmark_times_real_work_with_the_default_clock():
    # Wall-clock sanity only: sleeping 20 ms cannot take less than that (load only adds time).
    with dx.Benchmark(verbose=False) as b:
        time.sleep(0.02)
    assert b.elapsed >= 0.015


def test_benchmark_synchronizes_before_both_clock_reads(monkeypatch):
    calls = []
    monkeypatch.setattr(dx, "synchronize", calls.append)
    with dx.Benchmark(devices=["cpu"], verbose=False):
        assert calls == [["cpu"]]
    assert calls == [["cpu"]] * 2


class WorkClock:
    """A clock that only moves when the work runs: call i of work() takes costs[i] seconds
    (the last cost repeats). Timer's own reads cost nothing, so every run is exactly known."""

    def __init__(self, costs):
        self.costs, self.now, self.calls = list(costs), 0.0, 0

    def __call__(self):
        return self.now

    def work(self):
        self.now += self.costs[min(self.calls, len(self.costs) - 1)]
        self.calls += 1


def test_measure_separates_cold_from_warm():
    # 5 s for the first call (compiling), then 0.1 s a call: one call per run (>= 50 ms)
    clock = WorkClock([5.0, 0.1])
    m = dx.measure(clock.work, "work", clock=clock, max_time=1.0)
    assert m.name == "work" and m.cold == 5.0 and m.number == 1
    assert len(m.warm) >= 4 and m.warm == pytest.approx([0.1] * len(m.warm))
    assert m.median == pytest.approx(0.1) and m.band.spread == 0
    # no spread: Timer stops after its minimum of 4 runs (and one call to size a run)
    assert clock.calls == 1 + 1 + 4
    assert str(m) == "work: first call 5 s, then 100 ms ±<1% per call (4 runs)"


def test_measure_groups_fast_calls_into_runs():
    clock = WorkClock([1e-5])             # 10 us a call: Timer times blocks of many calls
    m = dx.measure(clock.work, clock=clock, max_time=1.0)
    assert m.number > 1 and m.median == pytest.approx(1e-5)


def test_measure_stops_at_the_time_cap_when_runs_keep_spreading():
    costs = [1.0] + [0.1, 0.3] * 100      # runs that never settle: IQR 100% of the median
    clock = WorkClock(costs)
    m = dx.measure(clock.work, clock=clock, max_time=1.0)
    assert 1.0 <= sum(m.warm) <= 1.0 + 0.3 + 1e-9     # stopped once 1 s of runs was spent
    assert m.band.low == pytest.approx(0.1) and m.band.high == pytest.approx(0.3)


class ReduceOverhead:
    """A fake torch.compile(mode="reduce-overhead") model on a fake clock: the first call
    compiles (5 s), the second records the CUDA graph (0.5 s), later calls replay it (0.1 s)."""

    def __init__(self):
        self.now, self.calls = 0.0, 0

    def clock(self):
        return self.now

    def __call__(self):
        self.calls += 1
        self.now += {1: 5.0, 2: 0.5}.get(self.calls, 0.1)


def test_measure_times_setup_calls_apart():
    model = ReduceOverhead()
    m = dx.measure(model, "reduce-overhead", clock=model.clock, setup=1, max_time=1.0)
    assert m.cold == 5.0 and m.setup == [0.5]
    assert m.warm == pytest.approx([0.1] * len(m.warm))  # replays only: not the capture
    assert str(m).startswith("reduce-overhead: first call 5 s, then 500 ms (call 2), then "
                             "100 ms ±<1% per call")


def test_without_setup_the_capture_lands_in_the_warm_runs():
    # Why the option exists: the second call is billed to what follows the first.
    model = ReduceOverhead()
    m = dx.measure(model, clock=model.clock, max_time=1.0)
    assert m.setup == [] and m.cold == 5.0 and model.calls >= 6


def test_measure_rejects_non_callable():
    with pytest.raises(TypeError, match="function to call"):
        dx.measure(42)


def test_measure_synchronizes_before_every_clock_read(monkeypatch):
    events = []
    monkeypatch.setattr(timing, "synchronize",
                        lambda devices: events.append("sync") if list(devices) else None)
    clock = WorkClock([0.1])

    def read():
        events.append("clock")
        return clock()

    dx.measure(clock.work, devices=[torch.device("cuda", 0)], clock=read, max_time=1.0)
    reads = [i for i, e in enumerate(events) if e == "clock"]
    assert reads and all(events[i - 1] == "sync" for i in reads)
    # a CPU alone needs no waiting: its operators are done when they return
    events.clear()
    dx.measure(clock.work, devices=["cpu"], clock=read, max_time=1.0)
    assert "sync" not in events[events.index("clock"):]


def test_measure_keeps_the_thread_count(monkeypatch):
    # torch.utils.benchmark.Timer runs on one thread unless told otherwise
    seen = []
    dx.measure(lambda: seen.append(torch.get_num_threads()), clock=TickClock(0.1),
               max_time=0.5)
    assert set(seen) == {torch.get_num_threads()}


def test_measure_interleaved_alternates_and_keeps_a_fixed_count():
    order = []
    clock = TickClock(0.1)
    out = dx.measure_interleaved({"a": lambda: order.append("a"),
                                  "b": lambda: order.append("b")},
                                 runs=3, before=lambda: order.append("|"), clock=clock)
    assert order == ["|", "a", "|", "b"] * 4        # one cold call each, then 3 rounds
    assert [len(x.warm) for x in out.values()] == [3, 3]
    assert out["a"].warm == pytest.approx([0.1] * 3) and out["a"].cold == pytest.approx(0.1)


def test_measure_interleaved_balance_makes_runs_of_equal_length():
    clock = WorkClock([0.0])
    costs = {"long": 0.1, "short": 0.004}
    calls = {name: 0 for name in costs}

    def work(name):
        def fn():
            calls[name] += 1
            clock.now += costs[name]
        return fn
    out = dx.measure_interleaved({n: work(n) for n in costs}, runs=4, balance=True,
                                 clock=clock)
    assert out["long"].number == 1 and out["short"].number == 25      # 0.1 s / 4 ms
    assert out["short"].warm == pytest.approx([0.004] * 4)            # seconds per call
    assert calls == {"long": 1 + 1 + 4, "short": 1 + 1 + 4 * 25}      # cold, probe, runs


def test_measure_interleaved_stops_when_settled_or_out_of_time():
    settled = dx.measure_interleaved({"a": lambda: None}, clock=TickClock(0.1), max_time=60)
    assert len(settled["a"].warm) == 4                  # no spread: the minimum of 4 rounds
    clock = WorkClock([0.1, 0.3])

    def uneven():
        clock.work()
        clock.costs.reverse()                            # 0.1, 0.3, 0.1, ...: never settles
    out = dx.measure_interleaved({"u": uneven}, clock=clock, max_time=2.0)
    assert 2.0 <= sum(out["u"].warm) <= 2.0 + 0.3 + 1e-9


def test_measure_interleaved_refuses_a_value_for_a_function():
    with pytest.raises(TypeError, match="function to call"):
        dx.measure_interleaved({"a": 1})


def test_format_seconds_shows_the_spread_of_a_measurement():
    m = dx.timing.Measurement("x", 1.0, [0.010, 0.0102, 0.0098, 0.0104, 0.0096])
    assert dx.format_seconds(m) == "10 ms ±2%"
    assert dx.format_seconds(dx.Band.exact(0.5)) == "500 ms ±<1%"


def test_synchronize_accepts_cpu_and_default():
    dx.synchronize(["cpu", torch.device("cpu")])
    dx.synchronize()


@pytest.mark.parametrize("seconds, text", [(2.5, "2.5 s"), (0.0123, "12.3 ms"),
                                           (3.8e-5, "38 us"), (5e-9, "5 ns")])
def test_format_seconds(seconds, text):
    assert dx.format_seconds(seconds) == text
