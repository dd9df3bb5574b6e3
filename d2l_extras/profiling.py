"""Timelines from torch.profiler: who ran what, when, on which CPU thread or device stream."""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from .hardware import accelerators
from .timing import synchronize

# Chrome-trace categories that torch.profiler (Kineto) writes, grouped by what they show.
CPU_CATEGORIES = {"cpu_op", "user_annotation"}
# Calls from a CPU thread into the CUDA runtime or driver (cudaLaunchKernel, cudaMemcpyAsync,
# cudaDeviceSynchronize): drawn on the thread that made them.
RUNTIME_CATEGORIES = {"cuda_runtime", "cuda_driver"}
DEVICE_CATEGORIES = {"kernel": "kernel", "gpu_memset": "kernel", "gpu_memcpy": "copy"}
# Kineto prints its own log lines (for example "USDT: ... profiler_start", and on a CUDA build
# without a GPU "ERROR: ... gpuGetDeviceCount failed with code 35") straight to the process's
# stderr, which Jupyter shows under the cell. Levels at or above this one are printed; this
# value is above every level Kineto has used (torch 2.6 to 2.14), so nothing is printed.
QUIET_KINETO_LOG_LEVEL = "6"


@dataclass(frozen=True)
class TimelineEvent:
    """One bar of a timeline: `name` ran on `lane` from `start` for `duration` seconds."""

    name: str
    lane: str      # "CPU thread 0" or "cuda:0 stream 7"
    start: float   # seconds since the first recorded event
    duration: float
    kind: str      # "cpu op", "launch" or "wait" (CPU calls into CUDA), "kernel" or "copy"

    @property
    def end(self) -> float:
        """Second at which the event finished."""
        return self.start + self.duration


def _profiler_options(devices: list[torch.device]) -> dict:
    # Kineto records CUDA kernels and copies; for MPS (and the CPU) it sees the CPU side only.
    # CUDA activity is asked for only where CUDA really runs: on a CUDA build without a GPU
    # torch would warn "CUDA is not available, disabling CUDA profiling".
    cuda = any(d.type == "cuda" for d in devices) and torch.cuda.is_available()
    # use_kineto=True: without it use_device="cuda" selects KINETO_GPU_FALLBACK, which records
    # CPU activity only, so no kernel or copy would reach the trace (torch.profiler.profile
    # passes the same flag, but importing its wrapper costs seconds: it loads torch._inductor).
    return {"use_device": "cuda" if cuda else None, "use_kineto": True}


# What the CPU allocator logs (once per process, from C++, on file descriptor 2) when a tensor
# allocated before a profile with memory=True is freed during it: the profiler knows no size for
# that block.
UNKNOWN_FREE = "Memory block of unknown size was allocated before the profiling started"


@contextlib.contextmanager
def _without_unknown_free_warning():
    # Expected whenever the profiled call frees a tensor made before it, and nothing a student
    # can act on; any other line written to fd 2 meanwhile is passed on unchanged.
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
            for line in tmp.read().decode(errors="replace").splitlines(keepends=True):
                if UNKNOWN_FREE not in line:
                    sys.stderr.write(line)


def profile_trace(fn: Callable[[], object], devices: Iterable[torch.device | str] | None = None,
                  trace_path: str | os.PathLike | None = None, memory: bool = False) -> dict:
    """Profile one call of fn on devices (default: every accelerator); return the Chrome trace.

    On CUDA devices the trace holds the kernels and copies of every stream. `memory=True` adds
    an instant event "[memory]" for every allocation and free (see dx.memory_timeline). Kineto's
    own log lines are silenced unless KINETO_LOG_LEVEL is set (0 shows them all; it is read
    once, when the process profiles for the first time).
    """
    if not callable(fn):
        raise TypeError(f"profile_trace() needs a function to call, got {type(fn).__name__}")
    devices = accelerators() if devices is None else [torch.device(d) for d in devices]
    os.environ.setdefault("KINETO_LOG_LEVEL", QUIET_KINETO_LOG_LEVEL)
    # Work queued before the profile would show up as unexplained device time.
    synchronize(devices)
    # torch.autograd.profiler is the Kineto profiler that torch.profiler.profile wraps.
    quiet = _without_unknown_free_warning() if memory else contextlib.nullcontext()
    with quiet, torch.autograd.profiler.profile(profile_memory=memory,
                                                **_profiler_options(devices)) as prof:
        fn()
        synchronize(devices)  # so every kernel fn queued ends inside the trace
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(trace_path) if trace_path is not None else pathlib.Path(tmp, "t.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(path))
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    _check_kernels_traced(trace)
    return trace


def _check_kernels_traced(trace: dict) -> None:
    # Kineto records kernels through CUPTI. When CUPTI fails (another profiler holds it, a
    # driver without profiling rights) it says so only in its log, which we silence: the trace
    # then holds the CPU's kernel launches but no kernel, and every share of device time built
    # on it would read as overhead. A launch without any kernel is that failure.
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    launches = sum(e.get("cat") in RUNTIME_CATEGORIES and "Launch" in e.get("name", "")
                   for e in events)
    kernels = sum(e.get("cat") == "kernel" for e in events)
    if launches and not kernels:
        raise RuntimeError(
            f"the profiler saw {launches} kernel launches but recorded no kernel: CUPTI, which "
            "traces the GPU, failed. Close other profilers (Nsight, another torch.profiler), "
            "check that this user may profile the GPU (NVreg_RestrictProfilingToAdminUsers=0), "
            "and set KINETO_LOG_LEVEL=0 before the first profile to see CUPTI's own message.")


def _top_level(events: list[TimelineEvent]) -> list[TimelineEvent]:
    # Profiler events nest (aten::matmul contains aten::mm); a Gantt chart wants the outermost.
    kept: list[TimelineEvent] = []
    for ev in sorted(events, key=lambda e: (e.start, -e.duration)):
        if kept and ev.end <= kept[-1].end + 1e-9:
            continue
        kept.append(ev)
    return kept


def _parsed(trace: dict | str | os.PathLike) -> list[tuple[TimelineEvent, object]]:
    # Every bar of the trace, with the correlation id that ties a launch to its kernel or copy.
    if isinstance(trace, (str, os.PathLike)):
        with open(trace, encoding="utf-8") as f:
            trace = json.load(f)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("trace_events() needs a Chrome trace: a dict (or JSON file) with a "
                         "'traceEvents' list, as torch.profiler's export_chrome_trace writes")
    raw = []  # (name, lane key, start us, duration us, kind, correlation)
    for ev in trace["traceEvents"]:
        if ev.get("ph") != "X" or "ts" not in ev:
            continue
        cat, args = ev.get("cat", ""), ev.get("args", {})
        if cat in CPU_CATEGORIES:
            raw.append((ev["name"], ("cpu", ev.get("tid")), ev["ts"], ev.get("dur", 0), "cpu op",
                        None))
        elif cat in RUNTIME_CATEGORIES:
            # cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize: the thread
            # waits for the device; anything else (launches, async copies) returns at once.
            kind = "wait" if "Synchronize" in ev["name"] else "launch"
            raw.append((ev["name"], ("cpu", ev.get("tid")), ev["ts"], ev.get("dur", 0), kind,
                        args.get("correlation")))
        elif cat in DEVICE_CATEGORIES:
            key = ("cuda", args.get("device", ev.get("pid")), args.get("stream", ev.get("tid")))
            raw.append((ev["name"], key, ev["ts"], ev.get("dur", 0), DEVICE_CATEGORIES[cat],
                        args.get("correlation")))
    if not raw:
        return []
    t0 = min(r[2] for r in raw)
    threads: dict = {}  # CPU thread ids are long OS numbers; number them in order of appearance
    for r in sorted(raw, key=lambda r: r[2]):
        if r[1][0] == "cpu":
            threads.setdefault(r[1][1], len(threads))
    parsed = []
    for name, key, ts, dur, kind, correlation in raw:
        lane = (f"CPU thread {threads[key[1]]}" if key[0] == "cpu"
                else f"cuda:{key[1]} stream {key[2]}")
        event = TimelineEvent(name, lane, (ts - t0) * 1e-6, dur * 1e-6, kind)
        parsed.append((event, correlation))
    return parsed


def trace_events(trace: dict | str | os.PathLike, top_level: bool = True) -> list[TimelineEvent]:
    """Turn a profiler trace (dict or JSON file) into TimelineEvents, one lane per thread/stream."""
    by_lane: dict[str, list[TimelineEvent]] = defaultdict(list)
    for ev, _ in _parsed(trace):
        by_lane[ev.lane].append(ev)
    out = []
    for lane_events in by_lane.values():
        out.extend(_top_level(lane_events) if top_level else lane_events)
    return sorted(out, key=lambda e: (e.lane, e.start))


def launch_stacks(trace: dict | str | os.PathLike) -> dict[TimelineEvent, list[TimelineEvent]]:
    """Each kernel and copy of a trace, with the CPU ops (outermost first) that launched it."""
    # A device runs a kernel later than the CPU thread launched it: what it belongs to (forward,
    # backward, which collective) is known from the ops that thread was inside at the launch.
    parsed = _parsed(trace)
    launches = {corr: ev for ev, corr in parsed
                if ev.kind in ("launch", "wait") and corr is not None}
    ops = defaultdict(list)
    for ev, _ in parsed:
        if ev.kind == "cpu op":
            ops[ev.lane].append(ev)
    stacks = {}
    for ev, corr in parsed:
        launch = launches.get(corr) if ev.kind in ("kernel", "copy") else None
        if launch is not None:
            stacks[ev] = sorted((op for op in ops[launch.lane]
                                 if op.start <= launch.start and launch.end <= op.end + 1e-9),
                                key=lambda op: (op.start, -op.duration))
    return stacks


def record_timeline(fn: Callable[[], object], devices: Iterable[torch.device | str] | None = None,
                    trace_path: str | os.PathLike | None = None) -> list[TimelineEvent]:
    """Profile one call of fn; return its top-level events per CPU thread and device stream."""
    return trace_events(profile_trace(fn, devices, trace_path))


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    # Merge overlapping (start, end) spans into disjoint ones, in order.
    merged: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def busy_time(events: Iterable[TimelineEvent]) -> dict[str, float]:
    """Seconds each lane was busy (overlapping events on one lane are counted once)."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for ev in events:
        spans[ev.lane].append((ev.start, ev.end))
    return {lane: sum(e - s for s, e in _union(items)) for lane, items in spans.items()}


def overlap_time(first: Iterable[TimelineEvent], second: Iterable[TimelineEvent]) -> float:
    """Seconds during which some event of `first` and some event of `second` both ran."""
    a = _union((ev.start, ev.end) for ev in first)
    b = _union((ev.start, ev.end) for ev in second)
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):  # walk both sorted lists of disjoint spans
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
