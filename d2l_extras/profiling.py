"""Timelines from torch.profiler: who ran what, when, on which CPU thread or device stream."""
from __future__ import annotations

import json
import os
import pathlib
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from .hardware import accelerators
from .timing import synchronize

# Chrome-trace categories that torch.profiler (Kineto) writes, grouped by what they show.
CPU_CATEGORIES = {"cpu_op", "user_annotation"}
DEVICE_CATEGORIES = {"kernel": "kernel", "gpu_memset": "kernel", "gpu_memcpy": "copy"}


@dataclass(frozen=True)
class TimelineEvent:
    """One bar of a timeline: `name` ran on `lane` from `start` for `duration` seconds."""

    name: str
    lane: str      # "CPU thread 0" or "cuda:0 stream 7"
    start: float   # seconds since the first recorded event
    duration: float
    kind: str      # "cpu op", "kernel" or "copy"

    @property
    def end(self) -> float:
        """Second at which the event finished."""
        return self.start + self.duration


def _profiled_device(devices: list[torch.device]) -> str | None:
    # Kineto records CUDA kernels and copies; for MPS (and the CPU) it sees the CPU side only.
    return "cuda" if any(d.type == "cuda" for d in devices) and torch.cuda.is_available() else None


def profile_trace(fn: Callable[[], object], devices: Iterable[torch.device | str] | None = None,
                  trace_path: str | os.PathLike | None = None) -> dict:
    """Profile one call of fn on devices (default: every accelerator); return the Chrome trace."""
    if not callable(fn):
        raise TypeError(f"profile_trace() needs a function to call, got {type(fn).__name__}")
    devices = accelerators() if devices is None else [torch.device(d) for d in devices]
    # Work queued before the profile would show up as unexplained device time.
    synchronize(devices)
    # torch.autograd.profiler is the Kineto profiler that torch.profiler.profile wraps; used
    # directly it skips the wrapper's import of torch._inductor (seconds on a small machine).
    with torch.autograd.profiler.profile(use_device=_profiled_device(devices)) as prof:
        fn()
        synchronize(devices)  # so every kernel fn queued ends inside the trace
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(trace_path) if trace_path is not None else pathlib.Path(tmp, "t.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(path))
        with open(path, encoding="utf-8") as f:
            return json.load(f)


def _top_level(events: list[TimelineEvent]) -> list[TimelineEvent]:
    # Profiler events nest (aten::matmul contains aten::mm); a Gantt chart wants the outermost.
    kept: list[TimelineEvent] = []
    for ev in sorted(events, key=lambda e: (e.start, -e.duration)):
        if kept and ev.end <= kept[-1].end + 1e-9:
            continue
        kept.append(ev)
    return kept


def trace_events(trace: dict | str | os.PathLike, top_level: bool = True) -> list[TimelineEvent]:
    """Turn a profiler trace (dict or JSON file) into TimelineEvents, one lane per thread/stream."""
    if isinstance(trace, (str, os.PathLike)):
        with open(trace, encoding="utf-8") as f:
            trace = json.load(f)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("trace_events() needs a Chrome trace: a dict (or JSON file) with a "
                         "'traceEvents' list, as torch.profiler's export_chrome_trace writes")
    raw = []  # (name, lane key, start us, duration us, kind)
    for ev in trace["traceEvents"]:
        if ev.get("ph") != "X" or "ts" not in ev:
            continue
        cat = ev.get("cat", "")
        if cat in CPU_CATEGORIES:
            raw.append((ev["name"], ("cpu", ev.get("tid")), ev["ts"], ev.get("dur", 0), "cpu op"))
        elif cat in DEVICE_CATEGORIES:
            args = ev.get("args", {})
            key = ("cuda", args.get("device", ev.get("pid")), args.get("stream", ev.get("tid")))
            raw.append((ev["name"], key, ev["ts"], ev.get("dur", 0), DEVICE_CATEGORIES[cat]))
    if not raw:
        return []
    t0 = min(r[2] for r in raw)
    threads: dict = {}  # CPU thread ids are long OS numbers; number them in order of appearance
    for r in sorted(raw, key=lambda r: r[2]):
        if r[1][0] == "cpu":
            threads.setdefault(r[1][1], len(threads))
    by_lane: dict[str, list[TimelineEvent]] = defaultdict(list)
    for name, key, ts, dur, kind in raw:
        lane = (f"CPU thread {threads[key[1]]}" if key[0] == "cpu"
                else f"cuda:{key[1]} stream {key[2]}")
        by_lane[lane].append(TimelineEvent(name, lane, (ts - t0) * 1e-6, dur * 1e-6, kind))
    out = []
    for lane_events in by_lane.values():
        out.extend(_top_level(lane_events) if top_level else lane_events)
    return sorted(out, key=lambda e: (e.lane, e.start))


def record_timeline(fn: Callable[[], object], devices: Iterable[torch.device | str] | None = None,
                    trace_path: str | os.PathLike | None = None) -> list[TimelineEvent]:
    """Profile one call of fn; return its top-level events per CPU thread and device stream."""
    return trace_events(profile_trace(fn, devices, trace_path))


def busy_time(events: Iterable[TimelineEvent]) -> dict[str, float]:
    """Seconds each lane was busy (overlapping events on one lane are counted once)."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for ev in events:
        spans[ev.lane].append((ev.start, ev.end))
    busy = {}
    for lane, items in spans.items():
        total, end = 0.0, float("-inf")
        for s, e in sorted(items):
            if e > end:
                total += e - max(s, end)
                end = e
        busy[lane] = total
    return busy
