"""Tests of d2l_extras.profiling: profiler traces turned into per-lane timeline events."""
import json

import pytest
import torch

import d2l_extras as dx

# A hand-written Kineto trace of one GPU step: a CPU op that launches a kernel, then a copy on a
# second stream. The notebooks only record such traces on a GPU; here it tests the parser.
GPU_TRACE = {"traceEvents": [
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000, "dur": 50},
    {"ph": "X", "cat": "cpu_op", "name": "aten::resolve_conj", "pid": 1, "tid": 1, "ts": 1010,
     "dur": 5},  # nested in aten::mm
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
     "ts": 1020, "dur": 10},
    {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 1040, "dur": 400,
     "args": {"device": 0, "stream": 7}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0,
     "tid": 13, "ts": 1440, "dur": 100, "args": {"device": 0, "stream": 13}},
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "pid": "Spans", "tid": 0, "ts": 900,
     "dur": 1000},
]}


def test_trace_events_gpu_lanes_and_top_level():
    events = dx.trace_events(GPU_TRACE)
    lanes = {e.lane for e in events}
    assert lanes == {"CPU thread 0", "cuda:0 stream 7", "cuda:0 stream 13"}
    cpu = [e for e in events if e.lane == "CPU thread 0"]
    assert [e.name for e in cpu] == ["aten::mm"]  # the nested op is folded into its parent
    kernel = next(e for e in events if e.kind == "kernel")
    assert kernel.start == pytest.approx(40e-6) and kernel.duration == pytest.approx(400e-6)
    copy = next(e for e in events if e.kind == "copy")
    assert copy.end == pytest.approx(540e-6)
    every = dx.trace_events(GPU_TRACE, top_level=False)
    assert {e.name for e in every} >= {"aten::resolve_conj"}


def test_trace_events_reads_a_file(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(GPU_TRACE))
    assert dx.trace_events(path) == dx.trace_events(GPU_TRACE)


def test_trace_events_bad_input():
    with pytest.raises(ValueError, match="traceEvents"):
        dx.trace_events({"events": []})
    with pytest.raises(ValueError, match="traceEvents"):
        dx.trace_events([1, 2])
    assert dx.trace_events({"traceEvents": []}) == []


def test_record_timeline_on_cpu(tmp_path):
    x = torch.randn(64, 64)

    def work():
        for _ in range(3):
            torch.relu(x @ x)

    path = tmp_path / "sub" / "trace.json"
    events = dx.record_timeline(work, devices=[torch.device("cpu")], trace_path=path)
    assert path.exists(), "the trace for Perfetto / chrome://tracing was not written"
    names = [e.name for e in events]
    assert names.count("aten::matmul") == 3 and names.count("aten::relu") == 3
    assert all(e.lane == "CPU thread 0" and e.kind == "cpu op" for e in events)
    starts = [e.start for e in events]
    assert starts == sorted(starts) and starts[0] == 0.0
    # top-level events on one thread never overlap
    assert all(a.end <= b.start + 1e-9 for a, b in zip(events, events[1:]))


def test_profile_trace_rejects_non_callable():
    with pytest.raises(TypeError, match="function"):
        dx.profile_trace(42)


def test_busy_time_counts_overlap_once():
    ev = dx.TimelineEvent
    events = [ev("a", "L", 0.0, 2.0, "kernel"), ev("b", "L", 1.0, 2.0, "kernel"),
              ev("c", "L", 5.0, 1.0, "kernel"), ev("d", "M", 0.0, 0.5, "copy")]
    assert dx.busy_time(events) == {"L": pytest.approx(4.0), "M": pytest.approx(0.5)}
    assert dx.busy_time([]) == {}


def test_square_side_fits_a_4gb_gpu():
    budget = 4 * 1024 ** 3
    # seed 001: 50 products of 4000 x 4000 plus the input ran a 4 GB GPU out of memory
    side = dx.square_side(4000, count=51, budget=budget)
    assert 64 <= side < 4000
    assert 51 * side ** 2 * 4 <= 0.25 * budget
    assert dx.square_side(100, count=51, budget=budget) == 100  # small requests are kept
    half = dx.square_side(4000, count=51, budget=budget, dtype=torch.float16)
    assert half > side  # two-byte numbers: more fit


def test_square_side_too_small_budget_raises():
    with pytest.raises(ValueError, match="smallest size"):
        dx.square_side(4000, count=51, budget=1024 ** 2)


@pytest.mark.parametrize("kwargs", [dict(wanted=0), dict(count=0), dict(fraction=0),
                                    dict(fraction=1.5), dict(minimum=0)])
def test_square_side_bad_arguments(kwargs):
    args = dict(wanted=100, count=1, budget=1024 ** 3) | kwargs
    with pytest.raises(ValueError, match="square_side needs"):
        dx.square_side(**args)


def test_square_side_uses_free_memory_of_the_cpu():
    assert 64 <= dx.square_side(512, count=2, device="cpu") <= 512
