"""Honest timing: synchronize the devices before reading the clock; cold and warm apart.

Every time the package and the notebooks measure comes from here:

* `Benchmark`, the book's context manager: one block, timed once, the devices synchronized.
* `measure(fn)`: fn's first call apart, then warm runs through `torch.utils.benchmark.Timer`
  (`adaptive_autorange`) until their spread is small or a time cap is spent. The result is a
  `Measurement`: the median and the interquartile range of the runs (`m.band`).
* `measure_interleaved({name: fn})`: several functions timed in turns, so that a burst of load
  from other programs hits all of them alike (and, with `before=dist.barrier` and a fixed
  number of runs, in every process of a job at once).
"""
from __future__ import annotations

import contextlib
import importlib
import io
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import torch

from .bands import Band
from .checks import whole_number
from .hardware import accelerators
from .profiles import by_profile

# --- a false alarm, silenced at its source

# The CUDA build of torch, on a machine without a GPU but with a CUDA toolkit installed (nvcc on
# the PATH), logs "No CUDA runtime is found, using CUDA_HOME=..." when torch.utils.cpp_extension
# is first used (Inductor building CPU code, torch.utils.benchmark's Timer). Nothing is wrong: CPU code needs no CUDA runtime,
# and hardware_report() already says that no GPU is visible. Students read it as an error, so we
# drop exactly this record, and only while CUDA is unavailable; every other message of that
# logger (compiler errors included) still appears.
_FALSE_ALARM = "No CUDA runtime is found"


class _NoFalseCudaAlarm(logging.Filter):
    """Drop the CPU-only 'No CUDA runtime is found' notice of torch.utils.cpp_extension."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith(_FALSE_ALARM) and not torch.cuda.is_available())


def _install_filter() -> None:
    log = logging.getLogger("torch.utils.cpp_extension")
    if not any(isinstance(f, _NoFalseCudaAlarm) for f in log.filters):
        log.addFilter(_NoFalseCudaAlarm())


def _quiet_import(name: str) -> None:
    """Import module `name`, keeping from stderr only the lines that are not the false alarm."""
    with contextlib.redirect_stderr(io.StringIO()) as caught:
        importlib.import_module(name)
    sys.stderr.write("".join(line for line in caught.getvalue().splitlines(keepends=True)
                             if not line.startswith(_FALSE_ALARM)))


# Installed on import: the notice is logged when torch.utils.cpp_extension is first used (by
# torch.utils.benchmark's Timer, or at the first compile), always after this module is imported:
# every timing and compiling helper imports it. Older releases (2.6, 2.7) print it instead, when
# that module is imported: import it here, quietly (0.2 s, which newer releases do not pay).
_install_filter()
if torch.__version__ < "2.8" and "torch.utils.cpp_extension" not in sys.modules \
        and not torch.cuda.is_available():
    _quiet_import("torch.utils.cpp_extension")


Clock = Callable[[], float]
SPREAD = 0.05   # measure() stops once the runs' IQR is this share of their median ...


def max_time() -> float:
    """... or once this many seconds of warm runs are spent (by profile: ci, class, full)."""
    return by_profile(0.2, 0.5, 2.0)


class TickClock:
    """A fake clock that advances `step` seconds each time it is read (for exact checks).

    A step of 0.05 s or more keeps one call per timed run (Timer groups faster calls).
    """

    def __init__(self, step: float = 1.0):
        if not (isinstance(step, (int, float)) and step > 0):
            raise ValueError(f"TickClock needs a step > 0 seconds, got {step!r}")
        self.step, self.now, self.reads = float(step), 0.0, 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def synchronize(devices: Iterable[torch.device | str] | None = None) -> None:
    """Wait until all queued work on the given devices (default: every accelerator) is done."""
    for dev in (accelerators() if devices is None else devices):
        dev = torch.device(dev)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        elif dev.type == "mps":
            torch.mps.synchronize()
        # CPU operators run synchronously: when they return, the work is done.


def format_seconds(seconds: "float | Band | Measurement") -> str:
    """A duration with a readable unit (ns, us, ms, s); a band or measurement with its spread."""
    band = getattr(seconds, "band", seconds)
    if isinstance(band, Band):
        return f"{format_seconds(band.value)} {band.pm}"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


@dataclass
class Measurement:
    """Timings of one workload: the first (cold) call and setup calls apart from the warm runs."""

    name: str
    cold: float
    warm: list[float] = field(default_factory=list)   # seconds per call, one per timed run
    setup: list[float] = field(default_factory=list)  # calls 2, 3, ... timed one by one
    number: int = 1                                    # calls per timed run

    @property
    def band(self) -> Band:
        """Median seconds per call, and the interquartile range of the runs."""
        return Band.of(self.warm)

    @property
    def median(self) -> float:
        """Median warm seconds per call."""
        return self.band.value

    @property
    def spread(self) -> float:
        """Half the interquartile range relative to the median (0.03: about +-3%)."""
        return self.band.spread

    @property
    def best(self) -> float:
        """The fastest run's seconds per call: what load from other programs disturbed least."""
        return min(self.warm)

    def __str__(self) -> str:
        setup = "".join(f", then {format_seconds(seconds)} (call {i})"
                        for i, seconds in enumerate(self.setup, 2))
        return (f"{self.name}: first call {format_seconds(self.cold)}{setup}, then "
                f"{format_seconds(self)} per call ({len(self.warm)} runs)")


class Benchmark:
    """Context manager that times a block, synchronizing the devices before both clock reads."""

    def __init__(self, description: str = "Done",
                 devices: Iterable[torch.device | str] | None = None, verbose: bool = True,
                 clock: Clock = time.perf_counter):
        self.description = description
        self.clock = clock  # injectable, so tests check the arithmetic without real sleeps
        self.devices = None if devices is None else list(devices)
        self.verbose = verbose
        self.elapsed: float | None = None

    def __enter__(self) -> "Benchmark":
        # Work queued before the block must not be billed to it.
        synchronize(self.devices)
        self._start = self.clock()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.devices)
        self.elapsed = self.clock() - self._start
        if self.verbose and exc[0] is None:
            print(f"{self.description}: {format_seconds(self.elapsed)}")


def _time_once(fn: Callable[[], object], devices, clock: Clock, number: int = 1) -> float:
    with Benchmark(devices=devices, verbose=False, clock=clock) as run:
        for _ in range(number):
            fn()
    return run.elapsed / number


def _to_wait_for(devices: Iterable[torch.device | str] | None) -> list[torch.device]:
    # The accelerators among the devices (default: all of them). CPU operators are done when
    # they return; leaving the CPU out keeps a clock read as cheap as the clock itself.
    devices = accelerators() if devices is None else devices
    return [d for d in (torch.device(d) for d in devices) if d.type != "cpu"]


def _check(fn: object, what: str) -> None:
    if not callable(fn):
        raise TypeError(f"{what} needs a function to call, got {type(fn).__name__}")


def _limits(spread: float, seconds: float | None) -> float:
    if not (isinstance(spread, (int, float)) and 0 < spread < 1):
        raise ValueError(f"spread is a fraction in (0, 1), got {spread!r}")
    seconds = max_time() if seconds is None else seconds
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"max_time must be a number of seconds > 0, got {seconds!r}")
    return float(seconds)


def measure(fn: Callable[[], object], name: str = "", *,
            devices: Iterable[torch.device | str] | None = None, setup: int = 0,
            spread: float = SPREAD, max_time: float | None = None,
            clock: Clock = time.perf_counter) -> Measurement:
    """Time fn's first call alone, then warm runs until their spread is small or time is spent.

    The warm runs are torch.utils.benchmark's `Timer.adaptive_autorange`: it groups fast calls
    into runs long enough to time, and runs them (at least 4) until the interquartile range is
    below `spread` of the median or `max_time` seconds (by profile) are spent. Every clock read
    synchronizes the devices (default: every accelerator). `setup` calls after the first are
    timed one by one, apart: under torch.compile(mode="reduce-overhead") the second call
    records the CUDA graph (setup=1).
    """
    from torch.utils.benchmark import Timer

    _check(fn, "measure()")
    seconds = _limits(spread, max_time)
    setup = whole_number(setup, "measure(): setup (calls timed apart after the first)", 0)
    devices = _to_wait_for(devices)
    cold = _time_once(fn, devices, clock)
    calls = [_time_once(fn, devices, clock) for _ in range(setup)]

    def read() -> float:  # Timer's clock: wait for the devices, then read ours
        synchronize(devices)
        return clock()

    # Timer groups calls into runs until its clock's own cost is below 1e-4 of a run: a clock
    # that needs no waiting keeps single calls of a millisecond apart.
    timer = Timer("fn()", globals={"fn": fn}, timer=read if devices else clock,
                  num_threads=torch.get_num_threads())
    runs = timer.adaptive_autorange(spread, min_run_time=min(0.05, seconds / 4),
                                    max_run_time=seconds)
    return Measurement(name or getattr(fn, "__name__", "fn"), cold, list(runs.times), calls,
                       runs.number_per_run)


def measure_interleaved(fns: Mapping[str, Callable[[], object]], *,
                        devices: Iterable[torch.device | str] | None = None,
                        runs: int | None = None, spread: float = SPREAD,
                        max_time: float | None = None, before: Callable[[], object] | None = None,
                        balance: bool = False,
                        clock: Clock = time.perf_counter) -> dict[str, Measurement]:
    """Time several functions in turns, a run of each per round, after one cold call each.

    Interleaved, a burst of load from other programs slows all of them alike, so their ratios
    hold. `balance=True` makes every run last about as long as one call of the slowest (the
    faster ones are called that many times more, after a second call to size them): on a
    shared machine a long call is interrupted where a short one slips through, and runs of
    equal length see the same share of the cores. `runs` fixes the rounds (every process of
    a job must take the same number: pass it with `before=dist.barrier`, which runs before
    each timed run); without it, rounds go on (at least 4) until every spread is below
    `spread` or `max_time` seconds are spent.
    """
    if not fns:
        raise ValueError("measure_interleaved() needs at least one {name: function}")
    for name, fn in fns.items():
        _check(fn, f"measure_interleaved(): {name!r}")
    if runs is not None:
        runs = whole_number(runs, "measure_interleaved(): runs")
    seconds = _limits(spread, max_time)
    devices = _to_wait_for(devices)

    def timed(fn: Callable[[], object], number: int = 1) -> float:
        if before is not None:
            before()
        return _time_once(fn, devices, clock, number)

    cold = {name: timed(fn) for name, fn in fns.items()}
    number = {name: 1 for name in fns}
    if balance:  # a second, warm call says how many calls make a run as long as the longest
        probe = {name: timed(fn) for name, fn in fns.items()}
        longest = max(probe.values())
        number = {name: max(1, min(100_000, round(longest / max(t, 1e-9))))
                  for name, t in probe.items()}
    warm: dict[str, list[float]] = {name: [] for name in fns}
    spent = 0.0
    while True:
        for name, fn in fns.items():
            warm[name].append(timed(fn, number[name]))
            spent += warm[name][-1] * number[name]
        done = len(warm[next(iter(fns))])
        if runs is not None:
            if done >= runs:
                break
        elif done >= 4 and (spent > seconds or all(
                Band.of(w).spread * 2 < spread for w in warm.values())):
            break
    return {name: Measurement(name, cold[name], warm[name], number=number[name])
            for name in fns}
