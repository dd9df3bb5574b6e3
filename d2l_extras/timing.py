"""Honest timing: synchronize the devices before reading the clock; cold and warm apart."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from .hardware import accelerators, whole_number


Clock = Callable[[], float]


class TickClock:
    """A fake clock that advances `step` seconds each time it is read (for exact checks)."""

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


def format_seconds(seconds: float) -> str:
    """Format a duration with a readable unit: ns, us, ms or s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


@dataclass
class Measurement:
    """Timings of one workload: the first (cold) call and any setup calls apart from the warm."""

    name: str
    cold: float
    warm: list[float] = field(default_factory=list)
    setup: list[float] = field(default_factory=list)  # calls 2, 3, ... timed one by one

    @property
    def median(self) -> float:
        """Median warm seconds per call."""
        return statistics.median(self.warm)

    def __str__(self) -> str:
        setup = "".join(f", then {format_seconds(seconds)} (call {i})"
                        for i, seconds in enumerate(self.setup, 2))
        return (f"{self.name}: first call {format_seconds(self.cold)}{setup}, then "
                f"{format_seconds(self.median)} per call (median of {len(self.warm)})")


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

    @classmethod
    def measure(cls, fn: Callable[[], object], name: str = "", repeats: int = 5,
                number: int = 1, devices: Iterable[torch.device | str] | None = None,
                clock: Clock = time.perf_counter, setup: int = 0) -> Measurement:
        """Time fn's first call alone, then `repeats` runs of `number` calls; per-call seconds.

        `setup` calls after the first are timed one by one too, out of the warm runs: under
        torch.compile(mode="reduce-overhead") the second call records the CUDA graph (setup=1).
        """
        if not callable(fn):
            raise TypeError(f"measure() needs a function to call, got {type(fn).__name__}")
        if repeats < 1 or number < 1:
            raise ValueError(f"measure() needs repeats >= 1 and number >= 1, "
                             f"got repeats={repeats}, number={number}")
        setup = whole_number(setup, "measure(): setup (calls timed apart after the first)", 0)
        devices = None if devices is None else list(devices)
        with cls(devices=devices, verbose=False, clock=clock) as first:
            fn()
        calls = []
        for _ in range(setup):
            with cls(devices=devices, verbose=False, clock=clock) as call:
                fn()
            calls.append(call.elapsed)
        warm = []
        for _ in range(repeats):
            with cls(devices=devices, verbose=False, clock=clock) as run:
                for _ in range(number):
                    fn()
            warm.append(run.elapsed / number)
        return Measurement(name or getattr(fn, "__name__", "fn"), first.elapsed, warm, calls)
