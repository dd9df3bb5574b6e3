"""peak_memory: the most bytes a call allocates, from the profiler (CPU) or the allocator (CUDA)."""
import subprocess
import sys
import textwrap

import pytest
import torch

import d2l_extras as dx
from d2l_extras import memory, profiling

MiB = 2 ** 20


def test_memory_is_measured_on_the_cpu_or_cuda():
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
    ("with torch.profiler.profile(profile_memory=True): drop()", True)])
def test_freeing_an_older_tensor_prints_no_warning(call, shown):
    code = textwrap.dedent(SCRIPT).format(call=call)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert (profiling.UNKNOWN_FREE in out.stderr) == shown, out.stderr
