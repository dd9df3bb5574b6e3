"""Notebook 00's measurement (`dx.Benchmark`) made honest on a busy machine: repeated runs, cold
and warm apart, median and spread."""
import contextlib
import functools
import io
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import torch

from .bands import Band
from .hardware import accelerators
from .profiles import by_profile

# Without a GPU but with a CUDA toolkit, torch.utils.cpp_extension (Inductor, Timer) logs this
# harmless notice that students read as an error: drop it, and only while CUDA is unavailable.
_FALSE_ALARM = "No CUDA runtime is found"


def _no_false_cuda_alarm(record: logging.LogRecord) -> bool:
    return not (str(record.msg).startswith(_FALSE_ALARM) and not torch.cuda.is_available())


def _quiet_import(name: str) -> None:
    with contextlib.redirect_stderr(io.StringIO()) as caught:
        __import__(name)
    sys.stderr.write("".join(line for line in caught.getvalue().splitlines(keepends=True)
                             if not line.startswith(_FALSE_ALARM)))


logging.getLogger("torch.utils.cpp_extension").addFilter(_no_false_cuda_alarm)
# Torch 2.6 and 2.7 print the notice on importing cpp_extension: import it here, quietly.
if torch.__version__ < "2.8" and "torch.utils.cpp_extension" not in sys.modules \
        and not torch.cuda.is_available():
    _quiet_import("torch.utils.cpp_extension")

Clock = Callable[[], float]
Devices = Iterable[torch.device | str] | None
SPREAD = 0.05   # measure() stops once the runs' IQR is this share of their median, or once
MAX_TIME = (0.2, 0.5, 2.0)  # ... this many seconds of warm runs are spent (profiles ci, class, full)


def synchronize(devices: Devices = None) -> None:
    """Wait until all queued work on the given devices (default: every accelerator) is done."""
    for dev in map(torch.device, accelerators() if devices is None else devices):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        elif dev.type == "mps":
            torch.mps.synchronize()


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

    band = property(lambda self: Band.of(self.warm),
                    doc="Median seconds per call, and the interquartile range of the runs.")
    median = property(lambda self: self.band.value, doc="Median warm seconds per call.")
    best = property(lambda self: min(self.warm), doc="The least disturbed run's seconds per call.")

    def __str__(self) -> str:
        setup = "".join(f", then {format_seconds(seconds)} (call {i})"
                        for i, seconds in enumerate(self.setup, 2))
        return (f"{self.name}: first call {format_seconds(self.cold)}{setup}, then "
                f"{format_seconds(self)} per call ({len(self.warm)} runs)")


def _time_once(fn: Callable[[], object], devices: Devices, clock: Clock, number: int = 1,
               before: Callable[[], object] | None = None) -> float:
    # dx.Benchmark (notebook 00) on an injectable clock, so that tests need not wait
    if before is not None:
        before()
    synchronize(devices)
    start = clock()
    for _ in range(number):
        fn()
    synchronize(devices)
    return (clock() - start) / number


def _prepare(fns: Mapping[str, object], seconds: float | None, devices: Devices):
    for what, fn in fns.items():
        if not callable(fn):  # f() where f was meant
            raise TypeError(f"{what} needs a function to call, got {type(fn).__name__}")
    seconds = by_profile(*MAX_TIME) if seconds is None else seconds
    # CPU operators are done when they return: not waiting on them keeps a clock read cheap.
    devices = accelerators() if devices is None else devices
    return seconds, [d for d in map(torch.device, devices) if d.type != "cpu"]


def measure(fn: Callable[[], object], name: str = "", *, devices: Devices = None, setup: int = 0,
            max_time: float | None = None, clock: Clock = time.perf_counter) -> Measurement:
    """Time fn's first call and `setup` more apart, then warm runs until settled or out of time."""
    from torch.utils.benchmark import Timer

    seconds, devices = _prepare({"measure()": fn}, max_time, devices)
    # setup=1 under torch.compile(mode="reduce-overhead"): the second call records the CUDA graph.
    cold, *calls = [_time_once(fn, devices, clock) for _ in range(1 + setup)]

    # Timer groups calls into runs until its clock's own cost is below 1e-4 of a run: a clock
    # that needs no waiting keeps single calls of a millisecond apart.
    read = (lambda: synchronize(devices) or clock()) if devices else clock
    timer = Timer("fn()", globals={"fn": fn}, timer=read,
                  num_threads=torch.get_num_threads())
    runs = timer.adaptive_autorange(SPREAD, min_run_time=min(0.05, seconds / 4),
                                    max_run_time=seconds)
    return Measurement(name or getattr(fn, "__name__", "fn"), cold, list(runs.times), calls,
                       runs.number_per_run)


def measure_interleaved(fns: Mapping[str, Callable[[], object]], *, devices: Devices = None,
                        runs: int | None = None, max_time: float | None = None,
                        before: Callable[[], object] | None = None, balance: bool = False,
                        clock: Clock = time.perf_counter) -> dict[str, Measurement]:
    """Time several functions in turns, a run of each per round, after one cold call each."""
    # In turns, load from other programs slows all alike; `balance` makes runs of equal length.
    seconds, devices = _prepare({f"measure_interleaved(): {name!r}": fn
                                 for name, fn in fns.items()}, max_time, devices)
    timed = functools.partial(_time_once, devices=devices, clock=clock, before=before)
    cold = {name: timed(fn) for name, fn in fns.items()}
    number = dict.fromkeys(fns, 1)
    # A shared machine interrupts long runs where short ones slip through: with `balance`, a
    # second, warm call says how many calls make a run as long as one call of the slowest.
    if balance:
        probe = {name: timed(fn) for name, fn in fns.items()}
        number = {name: max(1, min(100_000, round(max(probe.values()) / max(t, 1e-9))))
                  for name, t in probe.items()}
    warm: dict[str, list[float]] = {name: [] for name in fns}
    while True:
        for name, fn in fns.items():
            warm[name].append(timed(fn, number=number[name]))
        # `runs` rounds; else at least 4, until every spread is small or max_time is spent
        spent = sum(sum(w) * number[n] for n, w in warm.items())
        if len(warm[name]) >= (runs or 4) and (runs or spent > seconds or all(
                Band.of(w).spread * 2 < SPREAD for w in warm.values())):
            break
    return {name: Measurement(name, cold[name], warm[name], number=number[name])
            for name in fns}
