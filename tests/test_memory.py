"""Memory accounting: predictions, counts of live and saved tensors, timelines, the toy allocator."""
import subprocess
import sys
import textwrap

import matplotlib.pyplot as plt
import pytest
import torch
from torch import nn

import d2l_extras as dx
from d2l_extras import memory, profiling

MiB = 2 ** 20


def test_adam_costs_16_bytes_per_parameter_in_float32_and_in_mixed_precision():
    fp32 = dx.training_state_bytes(1000)
    assert fp32 == {"parameters": 4000, "gradients": 4000, "optimizer state": 8000}
    mixed = dx.training_state_bytes(1000, mixed=True)  # ZeRO's 2 + 2 + 12
    assert mixed == {"parameters": 2000, "gradients": 2000, "optimizer state": 12000}
    assert sum(dx.training_state_bytes(10, "sgd").values()) == 80
    assert dx.training_state_bytes(10, "momentum")["optimizer state"] == 40


def test_training_state_bytes_takes_a_count_written_as_a_float():
    assert dx.training_state_bytes(7.5e9, mixed=True)["parameters"] == 15_000_000_000


@pytest.mark.parametrize("bad", [-1, 2.5, float("nan"), True, "10"])
def test_training_state_bytes_needs_a_count(bad):
    with pytest.raises(ValueError, match="whole number"):
        dx.training_state_bytes(bad)


def test_training_state_bytes_names_the_optimizers_it_knows():
    with pytest.raises(ValueError, match=r"\['sgd', 'momentum', 'adam'\]"):
        dx.training_state_bytes(10, "lamb")


def test_tensor_bytes_counts_each_storage_once():
    a, b = torch.zeros(100), torch.zeros(10, dtype=torch.float64)
    assert dx.memory._tensor_bytes([a, a[:10], a.view(10, 10).t(), None, b]) == 400 + 80


def small_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.GELU(), nn.Linear(5, 3))


def test_model_and_optimizer_state_match_a_hand_count():
    net = small_net()
    n = 4 * 5 + 5 + 5 * 3 + 3  # 43 parameters
    opt = torch.optim.Adam(net.parameters())
    assert dx.memory.model_state_bytes(net, opt) == {"parameters": 4 * n, "gradients": 0,
                                              "optimizer state": 0}
    net(torch.randn(7, 4)).sum().backward()
    opt.step()
    # Adam's two moments per parameter; its step counters (scalars) are not per-parameter state
    assert dx.memory.model_state_bytes(net, opt) == {"parameters": 4 * n, "gradients": 4 * n,
                                              "optimizer state": 8 * n}
    assert any(v.dim() == 0 for s in opt.state.values() for v in s.values())
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    sgd.step()
    assert dx.memory.model_state_bytes(net, sgd)["optimizer state"] == 0
    assert dx.memory.model_state_bytes(net)["optimizer state"] == 0
    with pytest.raises(TypeError, match="Optimizer"):
        dx.memory.model_state_bytes(net, net)


def test_saved_tensors_match_a_hand_count_and_are_released_by_backward():
    net = small_net()
    x, y = torch.randn(7, 4), torch.randn(7, 3)
    with dx.memory.SavedTensors(exclude=net.parameters()) as saved:
        loss = nn.functional.mse_loss(net(x), y)
        saved.mark("backward")
        held = saved.bytes
        loss.backward()
    # Linear 1 saves x (7x4); GELU its input (7x5); Linear 2 the GELU output (7x5);
    # the loss its prediction and its target (7x3 each). Weights are excluded.
    assert held == saved.peak == 4 * (28 + 35 + 35 + 21 + 21)
    assert saved.bytes == 0 and saved.timeline[0] == 0 and saved.timeline[-1] == 0
    assert saved.marks == [(5, "backward")]  # five saves before the mark


def test_saved_tensors_count_a_storage_once_and_leave_out_what_is_excluded():
    w = torch.randn(50, requires_grad=True)
    with dx.memory.SavedTensors() as everything:
        loss = (w * w).sum()         # mul saves w twice: one storage
        assert everything.bytes == 200
        loss.backward()
    assert everything.peak == 200 and everything.bytes == 0
    with dx.memory.SavedTensors(exclude=[w]) as saved:
        (w * w).sum().backward()
    assert saved.peak == 0


def cpu_event(ts, n_bytes):
    return {"ph": "i", "name": "[memory]", "ts": ts,
            "args": {"Bytes": n_bytes, "Device Type": 0, "Device Id": -1, "Total Reserved": 0}}


def cuda_event(ts, n_bytes, reserved, device=0):
    return {"ph": "i", "name": "[memory]", "ts": ts,
            "args": {"Bytes": n_bytes, "Device Type": 1, "Device Id": device,
                     "Total Reserved": reserved}}


def phase(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur}


def traced(monkeypatch, trace):
    """memory_timeline reads this trace instead of profiling."""
    monkeypatch.setattr(memory, "profile_trace", lambda fn, devices, memory: trace)


def test_memory_timeline_follows_the_cpu_allocations_and_phases(monkeypatch):
    traced(monkeypatch, {"traceEvents": [
        phase("forward", 1000, 20), phase("backward", 1020, 30), phase("other", 1000, 5),
        cpu_event(1010, 300), cpu_event(1005, 100), cpu_event(1030, -300),
        cuda_event(1040, 999, 2048)]})
    tl = dx.memory.memory_timeline(lambda: None, "cpu", phases=("forward", "backward"))
    assert tl.allocated == [0, 100, 400, 100] and tl.peak == 400
    assert tl.times == pytest.approx([0, 5e-6, 10e-6, 30e-6])
    assert tl.reserved is None
    assert tl.phases == [("forward", 0.0, pytest.approx(20e-6)),
                         ("backward", pytest.approx(20e-6), pytest.approx(50e-6))]


def test_memory_timeline_on_cuda_keeps_one_device_and_its_reserve(monkeypatch):
    traced(monkeypatch, {"traceEvents": [cuda_event(10, 512, 2 * MiB + 8 * MiB),
                                         cuda_event(11, 4096, 99, device=1),
                                         cuda_event(12, -512, 2 * MiB + 8 * MiB),
                                         cpu_event(13, 64)]})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 8 * MiB)  # at the start
    tl = dx.memory.memory_timeline(lambda: None, "cuda")
    assert tl.allocated == [0, 512, 0]
    assert tl.reserved == [0, 2 * MiB, 2 * MiB]


def test_memory_is_measured_on_the_cpu_or_cuda():
    with pytest.raises(ValueError, match="measure on the CPU"):
        dx.memory.memory_timeline(lambda: None, "mps")
    with pytest.raises(ValueError, match="measure on the CPU"):
        dx.peak_memory(lambda: None, "mps")


def test_peak_memory_on_the_cpu_sees_a_workload_of_known_size():
    def together():
        a = torch.ones(MiB // 4)   # 1 MiB each, both alive
        b = torch.ones(MiB // 4)
        return a, b

    def one_after_the_other():
        for _ in range(2):
            torch.ones(MiB // 4)

    assert dx.peak_memory(together) == pytest.approx(2 * MiB, abs=4096)
    assert dx.peak_memory(one_after_the_other) == pytest.approx(MiB, abs=4096)
    with pytest.raises(TypeError, match="function"):
        dx.peak_memory(42)


def test_memory_timeline_names_the_phases_of_a_step():
    from torch.profiler import record_function

    def step():
        with record_function("forward"):
            a = torch.ones(MiB // 4)
        with record_function("backward"):
            del a
    tl = dx.memory.memory_timeline(step)
    assert [p[0] for p in tl.phases] == ["forward", "backward"]
    assert tl.peak == pytest.approx(MiB, abs=4096) and tl.allocated[-1] <= 4096


def test_peak_memory_on_cuda_reads_the_allocator_counters(monkeypatch):
    state = {"allocated": 100, "peak": 100}
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda d: state.update(peak=state["allocated"]))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: state["peak"])
    monkeypatch.setattr(memory, "synchronize", lambda devices: None)

    def fn():  # 500 bytes more at its peak, 200 left when it returns
        state.update(peak=600, allocated=300)
    assert dx.peak_memory(fn, "cuda") == 500


SCRIPT = """
import torch
import d2l_extras as dx
old = torch.ones(1000)
def drop():
    global old
    del old
{call}
"""


@pytest.mark.parametrize("call, shown", [
    ("dx.peak_memory(drop)", False),
    ("dx.profile_trace(drop, ['cpu'], memory=True)", False),
    # torch's profiler alone prints the line: the checks above can fail
    ("with torch.autograd.profiler.profile(profile_memory=True): drop()", True)])
def test_freeing_an_older_tensor_prints_no_warning(call, shown):
    code = textwrap.dedent(SCRIPT).format(call=call)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert (profiling.UNKNOWN_FREE in out.stderr) == shown, out.stderr


def test_snapshot_series_adds_allocations_and_completed_frees():
    snap = {"device_traces": [[
        {"action": "alloc", "size": 100}, {"action": "free_requested", "size": 100},
        {"action": "alloc", "size": 50}, {"action": "free_completed", "size": 100},
        {"action": "segment_alloc", "size": 2 * MiB}]]}
    assert dx.memory.snapshot_series(snap) == [0, 100, 150, 50]
    with pytest.raises(ValueError, match="_record_memory_history"):
        dx.memory.snapshot_series(snap, device_index=1)
    with pytest.raises(ValueError, match="_snapshot"):
        dx.memory.snapshot_series([])


def test_the_toy_allocator_reuses_freed_blocks_and_fragments():
    toy = dx.memory.CachingAllocatorModel()
    a = toy.malloc(100 * MiB)
    assert (toy.allocated, toy.reserved) == (100 * MiB, 100 * MiB)
    toy.free(a)
    assert (toy.allocated, toy.reserved) == (0, 100 * MiB)       # kept for reuse
    b = toy.malloc(60 * MiB)
    assert (toy.allocated, toy.reserved) == (60 * MiB, 100 * MiB)  # a's block reused
    c = toy.malloc(120 * MiB)
    assert toy.reserved == 220 * MiB                              # no free block fits
    toy.free(b)
    toy.empty_cache()
    assert (toy.allocated, toy.reserved) == (120 * MiB, 120 * MiB)  # c's block stays
    toy.free(c)
    toy.empty_cache()
    assert (toy.allocated, toy.reserved) == (0, 0)


def test_the_toy_allocator_rounds_requests_and_segments():
    toy = dx.memory.CachingAllocatorModel()
    small = toy.malloc(1)
    assert (toy.allocated, toy.reserved) == (512, 2 * MiB)
    toy.free(small)
    toy.malloc(1000)           # fits the free 2 MiB block
    assert (toy.allocated, toy.reserved) == (1024, 2 * MiB)
    toy.malloc(3 * MiB + 1)
    assert toy.reserved == 2 * MiB + 4 * MiB


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_the_toy_allocator_refuses_bad_requests(bad):
    toy = dx.memory.CachingAllocatorModel()
    with pytest.raises(ValueError, match="whole number"):
        toy.malloc(bad)
    with pytest.raises(ValueError, match="no allocated block"):
        toy.free(7)


