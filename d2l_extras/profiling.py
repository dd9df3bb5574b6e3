"""Timelines from torch.profiler: who ran what, when, on which CPU thread or device stream."""
import contextlib
import json
import math
import os
import pathlib
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch.profiler import ProfilerActivity

from .hardware import accelerators
from .timing import Devices, synchronize

# Kineto's Chrome-trace categories, by the bar each becomes (cuda_runtime: cudaLaunchKernel, ...).
KINDS = {"cpu_op": "cpu op", "user_annotation": "cpu op", "cuda_runtime": "launch",
         "cuda_driver": "launch", "kernel": "kernel", "gpu_memset": "kernel", "gpu_memcpy": "copy"}
# Above every line Kineto would print under the cell ("USDT: ... profiler_start", ...).
QUIET_KINETO_LOG_LEVEL = "6"
# Logged from C++ on fd 2 when a profile with memory=True sees an older tensor freed.
UNKNOWN_FREE = "Memory block of unknown size was allocated before the profiling started"


@dataclass(frozen=True)
class TimelineEvent:
    """One bar of a timeline: `name` ran on `lane` from `start` for `duration` seconds."""
    name: str
    lane: str      # "CPU thread 0" or "cuda:0 stream 7"
    start: float   # seconds since the first recorded event
    duration: float
    kind: str      # "cpu op", "launch" or "wait" (CPU calls into CUDA), "kernel" or "copy"
    end = property(lambda self: self.start + self.duration, doc="Second the event finished.")


@contextlib.contextmanager
def _without_unknown_free_warning():
    # UNKNOWN_FREE is nothing a student can act on; other lines written to fd 2 are passed on.
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            sys.stderr.writelines(line for line in tmp.read().decode(errors="replace")
                                  .splitlines(keepends=True) if UNKNOWN_FREE not in line)


def profile_trace(fn: Callable[[], object], devices: Devices = None,
                  trace_path: str | os.PathLike | None = None, memory: bool = False) -> dict:
    """Profile one call of fn on devices (default: every accelerator); return the Chrome trace."""
    devices = accelerators() if devices is None else [torch.device(d) for d in devices]
    os.environ.setdefault("KINETO_LOG_LEVEL", QUIET_KINETO_LOG_LEVEL)  # read at the first profile
    # CUDA activity only where CUDA runs, or torch warns "CUDA is not available".
    cuda = any(d.type == "cuda" for d in devices) and torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda
    synchronize(devices)  # work queued before would show up as unexplained device time
    quiet = _without_unknown_free_warning() if memory else contextlib.nullcontext()
    # One cycle, so nothing to clear: acc_events=True only stops torch 2.11 from warning, at a
    # process's first profile, that each cycle's events are cleared.
    with quiet, torch.profiler.profile(activities=activities, profile_memory=memory,
                                       acc_events=True) as prof:
        fn()
        synchronize(devices)  # so every kernel fn queued ends inside the trace
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(trace_path or pathlib.Path(tmp, "t.json"))
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text(encoding="utf-8"))
    _check_kernels_traced(trace)
    return trace


def _check_kernels_traced(trace: dict) -> None:
    # When CUPTI, which traces the GPU for Kineto, fails, it says so only in the log we silence:
    # the trace holds the launches but no kernel, and all device time would read as overhead.
    bars = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    launches = sum(KINDS.get(e.get("cat")) == "launch" and "Launch" in e.get("name", "")
                   for e in bars)
    if launches and not any(e.get("cat") == "kernel" for e in bars):
        raise RuntimeError(f"{launches} kernel launches but no kernel traced: CUPTI failed. Close "
                           "other profilers, allow profiling (NVreg_RestrictProfilingToAdminUsers"
                           "=0); KINETO_LOG_LEVEL=0 shows CUPTI's message.")


def _parsed(trace: dict) -> list[tuple[TimelineEvent, object]]:
    # Each bar, with the correlation id that ties a launch to its kernel or copy.
    bars = [ev for ev in trace["traceEvents"]
            if ev.get("ph") == "X" and "ts" in ev and ev.get("cat") in KINDS]
    t0 = min((ev["ts"] for ev in bars), default=0)
    threads: dict = {}  # CPU thread ids are long OS numbers: numbered in order of appearance
    parsed = []
    for ev in sorted(bars, key=lambda ev: ev["ts"]):
        kind, args = KINDS[ev["cat"]], ev.get("args", {})
        device, stream = args.get("device", ev.get("pid")), args.get("stream", ev.get("tid"))
        lane = (f"cuda:{device} stream {stream}" if kind in ("kernel", "copy")
                else f"CPU thread {threads.setdefault(ev.get('tid'), len(threads))}")
        if kind == "launch" and "Synchronize" in ev["name"]:
            kind = "wait"  # cudaDeviceSynchronize and the like: the thread waits for the device
        parsed.append((TimelineEvent(ev["name"], lane, (ev["ts"] - t0) * 1e-6,
                                     ev.get("dur", 0) * 1e-6, kind), args.get("correlation")))
    return parsed


def trace_events(trace: dict) -> list[TimelineEvent]:
    """Turn a profiler trace into its outermost TimelineEvents, one lane per thread/stream."""
    # Profiler events nest (aten::matmul contains aten::mm); a Gantt chart wants the outermost.
    kept: list[TimelineEvent] = []
    for ev in sorted((ev for ev, _ in _parsed(trace)),
                     key=lambda e: (e.lane, e.start, -e.duration)):
        if not (kept and kept[-1].lane == ev.lane and ev.end <= kept[-1].end + 1e-9):
            kept.append(ev)
    return kept


def launch_stacks(trace: dict) -> dict[TimelineEvent, list[TimelineEvent]]:
    """Each kernel and copy of a trace, with the CPU ops (outermost first) that launched it."""
    # What a kernel belongs to (forward, a collective) shows in the ops around its launch.
    parsed = _parsed(trace)
    launches = {corr: ev for ev, corr in parsed
                if ev.kind in ("launch", "wait") and corr is not None}
    ops = sorted((ev for ev, _ in parsed if ev.kind == "cpu op"),
                 key=lambda op: (op.start, -op.duration))
    return {ev: [op for op in ops if op.lane == launch.lane and op.start <= launch.start
                 and launch.end <= op.end + 1e-9]
            for ev, corr in parsed
            if ev.kind in ("kernel", "copy") and (launch := launches.get(corr))}


def record_timeline(fn: Callable[[], object], devices: Devices = None,
                    trace_path: str | os.PathLike | None = None) -> list[TimelineEvent]:
    """Profile one call of fn; return its top-level events per CPU thread and device stream."""
    return trace_events(profile_trace(fn, devices, trace_path))


def busy_time(events: Iterable[TimelineEvent]) -> dict[str, float]:
    """Seconds each lane was busy (overlapping events on one lane are counted once)."""
    busy, reached = defaultdict(float), defaultdict(lambda: -math.inf)  # per lane
    for ev in sorted(events, key=lambda ev: ev.start):
        busy[ev.lane] += max(0.0, ev.end - max(ev.start, reached[ev.lane]))
        reached[ev.lane] = max(reached[ev.lane], ev.end)
    return dict(busy)

