"""Tests of d2l_extras.profiling: profiler traces turned into per-lane timeline events."""
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import warnings

import pytest
import torch
from torch.profiler import ProfilerActivity

import d2l_extras as dx
from d2l_extras import profiling

GPU_TRACE_PATH = pathlib.Path(__file__).parent / "data" / "kineto_gpu_trace.json"
# A hand-written trace in the format torch 2.x's Kineto writes on a GPU machine (notebook 03's
# compute-and-copy on cuda:0 plus one product on cuda:1); the notebooks record such traces only
# on a GPU, so the parser is tested on this one. Times below are in microseconds.
GPU_TRACE = json.loads(GPU_TRACE_PATH.read_text())
US = 1e-6
REAL_PROFILE = torch.profiler.profile


def test_trace_events_gpu_lanes_and_kinds():
    events = dx.profiling.trace_events(GPU_TRACE)
    lanes = {e.lane for e in events}
    assert lanes == {"CPU thread 0", "cuda:0 stream 7", "cuda:0 stream 13", "cuda:1 stream 7"}
    kernels = [e for e in events if e.kind == "kernel" and e.name != "Memset (Device)"]
    assert [(e.lane, e.start, e.duration) for e in kernels] == [
        ("cuda:0 stream 7", pytest.approx(30 * US), pytest.approx(600 * US)),
        ("cuda:0 stream 7", pytest.approx(630 * US), pytest.approx(600 * US)),
        ("cuda:1 stream 7", pytest.approx(168.5 * US), pytest.approx(600 * US))]
    copies = [e for e in events if e.kind == "copy"]
    assert [e.name for e in copies] == ["Memcpy DtoH (Device -> Pinned)"] * 2
    assert {e.lane for e in copies} == {"cuda:0 stream 13"}
    assert copies[-1].end == pytest.approx((1722 - 90) * US)  # t = 0 at the first event


def test_trace_events_top_level_cpu_thread_and_its_wait():
    cpu = [e for e in dx.profiling.trace_events(GPU_TRACE) if e.lane == "CPU thread 0"]
    # The record_function range folds every operator and launch inside it; the barrier after
    # it is where Python waited for both GPUs.
    assert [(e.name, e.kind) for e in cpu] == [("compute_and_copy", "cpu op"),
                                               ("cudaDeviceSynchronize", "wait")]
    assert cpu[1].duration == pytest.approx(1455 * US)


def test_trace_events_every_event_and_what_is_skipped():
    every = [e for e, _ in profiling._parsed(GPU_TRACE)]
    names = [e.name for e in every]
    assert names.count("cudaLaunchKernel") == 3 and names.count("cudaMemcpyAsync") == 2
    assert {e.kind for e in every if e.name.startswith("cuda")} == {"launch", "wait"}
    assert names.count("aten::mm") == 3 and "Memset (Device)" in names
    # metadata, flow arrows (ac2g), the profiler's own span and instant events are no bars
    drawn = [ev for ev in GPU_TRACE["traceEvents"]
             if ev["ph"] == "X" and ev["cat"] not in ("Trace",)]
    assert len(every) == len(drawn)
    assert any(ev["ph"] in "sf" and ev["cat"] == "ac2g" for ev in GPU_TRACE["traceEvents"])


def test_overlap_of_copies_and_kernels_in_the_gpu_trace():
    events = dx.profiling.trace_events(GPU_TRACE)
    kernels = [e for e in events if e.kind == "kernel" and e.lane.startswith("cuda:0")]
    copies = [e for e in events if e.kind == "copy"]
    # The first copy (722-1122 us) runs under the second product (720-1320 us); the last
    # copy has no product left to hide behind.
    assert dx.busy_time(copies) == {"cuda:0 stream 13": pytest.approx(800 * US)}
    busy = dx.busy_time(kernels)["cuda:0 stream 7"]   # two products and a 2.1 us memset
    assert busy == pytest.approx(1202.1 * US)
    # Notebook 03's reading: both rows' busy time, less the time the work spans, ran at once.
    spanned = dx.busy_time([dataclasses.replace(e, lane="GPU") for e in kernels + copies])
    assert busy + 800 * US - spanned["GPU"] == pytest.approx(400 * US)


def test_launch_stacks_name_the_cpu_ops_around_each_launch():
    stacks = dx.profiling.launch_stacks(GPU_TRACE)
    devices = [e for e in dx.profiling.trace_events(GPU_TRACE) if e.lane.startswith("cuda")]
    assert set(stacks) == set(devices)  # every kernel, copy and memset: each launch is recorded
    names = {(e.name, e.lane, round(e.start / US)): [op.name for op in stack]
             for e, stack in stacks.items()}
    # The second product runs on cuda:0 at 630 us, long after its launch (92 us) inside
    # aten::mm inside aten::matmul inside the compute_and_copy range.
    assert names[("ampere_sgemm_128x64_nn", "cuda:0 stream 7", 630)] == [
        "compute_and_copy", "aten::matmul", "aten::mm"]
    assert names[("Memset (Device)", "cuda:0 stream 7", 11)] == ["compute_and_copy", "aten::zero_"]
    assert names[("Memcpy DtoH (Device -> Pinned)", "cuda:0 stream 13", 632)] == [
        "compute_and_copy", "aten::copy_"]
    # Without the range the stacks are shorter; without its launch a kernel has none.
    events = [ev for ev in GPU_TRACE["traceEvents"] if ev.get("cat") != "user_annotation"
              and (ev.get("cat"), ev.get("args", {}).get("correlation")) != ("cuda_runtime", 1009)]
    stacks = dx.profiling.launch_stacks({"traceEvents": events})
    assert {e.lane for e in stacks} == {"cuda:0 stream 7", "cuda:0 stream 13"}
    assert {tuple(op.name for op in stack) for stack in stacks.values()} == {
        ("aten::zero_",), ("aten::matmul", "aten::mm"), ("aten::copy_",)}


class SpyProfiler:
    """Stands in for torch.profiler.profile on a CPU: builds the real profiler (which works out
    its activities and device without starting), keeps what it chose, exports the GPU trace."""

    made: list = []

    def __init__(self, **options):
        self.options = options
        real = REAL_PROFILE(**options)
        self.activities, self.use_device = set(real.activities), real.use_device
        SpyProfiler.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def export_chrome_trace(self, path):
        shutil.copy(GPU_TRACE_PATH, path)


@pytest.fixture
def pretend_cuda(monkeypatch):
    """A CPU-only machine made to look like one with CUDA GPUs and a CUPTI-enabled Kineto."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.autograd.profiler, "_supported_activities",
                        lambda: {ProfilerActivity.CPU, ProfilerActivity.CUDA})
    synced = []
    monkeypatch.setattr(profiling, "synchronize", lambda devices: synced.append(list(devices)))
    monkeypatch.setattr(torch.profiler, "profile", SpyProfiler)
    SpyProfiler.made.clear()
    return synced


def test_profile_trace_asks_for_cuda_activity_on_cuda_devices(pretend_cuda):
    calls = []
    events = dx.record_timeline(lambda: calls.append(1), devices=["cuda:0", "cuda:1"])
    assert calls == [1]
    (spy,) = SpyProfiler.made
    assert spy.activities == {ProfilerActivity.CPU, ProfilerActivity.CUDA}, spy.options
    assert spy.use_device == "cuda"  # the Kineto profiler it builds records kernels
    # before the profile (queued work stays out) and inside it (every kernel ends inside)
    assert pretend_cuda == [[torch.device("cuda", 0), torch.device("cuda", 1)]] * 2
    assert {e.kind for e in events} >= {"kernel", "copy"}


def test_profile_trace_asks_for_cpu_activity_only_on_cpu_devices(pretend_cuda):
    dx.profile_trace(lambda: None, devices=["cpu"])
    (spy,) = SpyProfiler.made
    assert spy.activities == {ProfilerActivity.CPU} and spy.use_device is None
    assert spy.options["profile_memory"] is False


def test_profile_trace_passes_memory_on(pretend_cuda):
    dx.profile_trace(lambda: None, devices=["cpu"], memory=True)
    (spy,) = SpyProfiler.made
    assert spy.options["profile_memory"] is True


def test_cuda_devices_without_cuda_profile_the_cpu_quietly(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(profiling, "synchronize", lambda devices: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "CUDA is not available, disabling CUDA profiling"
        events = dx.record_timeline(lambda: torch.ones(8) + 1, devices=["cuda:0"])
    assert {e.kind for e in events} == {"cpu op"}


def test_profile_trace_quiets_kineto_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    dx.profile_trace(lambda: None, devices=["cpu"])
    assert os.environ["KINETO_LOG_LEVEL"] == profiling.QUIET_KINETO_LOG_LEVEL
    monkeypatch.setenv("KINETO_LOG_LEVEL", "0")
    dx.profile_trace(lambda: None, devices=["cpu"])
    assert os.environ["KINETO_LOG_LEVEL"] == "0"  # a student's own setting is kept


def test_a_profile_prints_no_kineto_lines():
    # Kineto writes to the process's stderr, which Jupyter shows under the cell; it reads
    # KINETO_LOG_LEVEL once, at the first profile, so this needs a fresh process.
    env = {k: v for k, v in os.environ.items() if k not in ("KINETO_LOG_LEVEL",
                                                             "PYTHONDONTWRITEBYTECODE")}
    code = ("import torch, d2l_extras as dx\n"
            "dx.record_timeline(lambda: torch.ones(8) + 1, devices=['cpu'])\n"
            "dx.record_timeline(lambda: torch.ones(8) + 1)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    noise = [line for line in (out.stdout + out.stderr).splitlines()
             if re.match(r"(USDT|ERROR|STAGE|WARNING|INFO):\d{4}-", line)]
    assert not noise, noise


def test_record_timeline_on_cpu(tmp_path):
    x = torch.randn(64, 64)

    def work():
        for _ in range(3):
            torch.relu(x @ x)

    path = tmp_path / "trace.json"
    events = dx.record_timeline(work, devices=[torch.device("cpu")], trace_path=path)
    assert path.exists(), "the trace for Perfetto / chrome://tracing was not written"
    names = [e.name for e in events]
    assert names.count("aten::matmul") == 3 and names.count("aten::relu") == 3
    assert all(e.lane == "CPU thread 0" and e.kind == "cpu op" for e in events)
    starts = [e.start for e in events]
    assert starts == sorted(starts) and starts[0] == 0.0
    # top-level events on one thread never overlap
    assert all(a.end <= b.start + 1e-9 for a, b in zip(events, events[1:]))


def test_busy_time_counts_overlap_once():
    ev = dx.profiling.TimelineEvent
    events = [ev("a", "L", 0.0, 2.0, "kernel"), ev("b", "L", 1.0, 2.0, "kernel"),
              ev("c", "L", 5.0, 1.0, "kernel"), ev("d", "M", 0.0, 0.5, "copy")]
    assert dx.busy_time(events) == {"L": pytest.approx(4.0), "M": pytest.approx(0.5)}
    assert dx.busy_time([]) == {}


def test_square_side_fits_a_4gb_gpu():
    budget = 4 * 1024 ** 3
    # seed 001: 50 products of 4000 x 4000 plus the input ran a 4 GB GPU out of memory
    side = dx.hardware.square_side(4000, count=51, budget=budget)
    assert 64 <= side < 4000
    assert 51 * side ** 2 * 4 <= 0.25 * budget
    assert dx.hardware.square_side(100, count=51, budget=budget) == 100  # small requests are kept
    half = dx.hardware.square_side(4000, count=51, budget=budget, dtype=torch.float16)
    assert half > side  # two-byte numbers: more fit


def test_square_side_too_small_budget_raises():
    with pytest.raises(ValueError, match="smallest size"):
        dx.hardware.square_side(4000, count=51, budget=1024 ** 2)


def test_square_side_uses_free_memory_of_the_cpu():
    assert 64 <= dx.hardware.square_side(512, count=2, device="cpu") <= 512


def test_a_trace_with_launches_but_no_kernel_is_a_cupti_failure():
    # What a CUDA trace looks like when CUPTI failed: the CPU's launches, no kernel.
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 2,
              "args": {"correlation": 7}}
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}
    with pytest.raises(RuntimeError, match="CUPTI"):
        profiling._check_kernels_traced({"traceEvents": [op, launch]})
    kernel = {"ph": "X", "cat": "kernel", "name": "nvjet_hsh_128x256", "ts": 3, "dur": 4,
              "args": {"correlation": 7}}
    profiling._check_kernels_traced({"traceEvents": [op, launch, kernel]})  # traced: fine
    profiling._check_kernels_traced({"traceEvents": [op]})  # a CPU trace: nothing to trace
    profiling._check_kernels_traced(GPU_TRACE)  # Kineto's format, kernels and all
