"""Notebook 04 writes copy_rate, gather_times, read_times, axpy_times, matmul_gflops, tiny_op_time
and transfer_rate in #@save cells (the notebook is their one source; `make lib` generates them
into d2l_extras, so they are dx.copy_rate and so on). Here they run on a fake clock, TickClock(),
which advances one second at every read: every timed stretch then "lasts" exactly one second, so
a rate is exactly what was counted, whatever the load on the machine, and is checked against a
count made here (issue 16: such checks leave the lesson).

The GPU cells run here too, on any machine: torch.cuda describes a fake GPU and the
measurements are replaced by known numbers, so what a cell concludes is checked for a T4, a P100
and an H100 without one."""
import contextlib
import io
import json
import re

import pytest
import torch

import d2l_extras as dx
from d2l_extras import parallel
from clocks import TickClock
from nbcells import cell_source, notebook_namespace, notebook_path

MiB = 2 ** 20


def tick():
    return TickClock()   # each timed stretch: exactly 1 s


@pytest.mark.parametrize("n_bytes", [MiB, 4098])
def test_copy_rate_counts_bytes_read_and_written(n_bytes):
    # whole float32 elements: of 4098 bytes asked for, 4096 are copied
    copied = n_bytes // 4 * 4
    assert dx.copy_rate(n_bytes, clock=tick()).value == pytest.approx(2 * copied / 1e9), \
        "copy_rate counts other bytes than those read plus those written"


@pytest.mark.parametrize("n", [4096, 1000])
def test_gather_times_are_per_element(n):
    random_s, contiguous_s = dx.gather_times(n, MiB, clock=tick())
    assert [random_s.value, contiguous_s.value] == pytest.approx([1 / n, 1 / n]), \
        "gather_times divides by other than the elements gathered"


@pytest.mark.parametrize("n", [1000, 37])
def test_axpy_times_are_per_element(n):
    loop_s, vector_s = dx.axpy_times(n, clock=tick())
    assert [loop_s.value, vector_s.value] == pytest.approx([1 / n, 1 / n])


@pytest.mark.parametrize("n", [16, 64])
def test_matmul_gflops_counts_2_n_cubed_flops(n):
    assert dx.matmul_gflops(n, clock=tick()).value == pytest.approx(2 * n ** 3 / 1e9)


def test_transfer_rate_counts_the_bytes_moved_once():
    # one direction: a transfer moves its bytes once (a copy within one memory counts twice)
    assert dx.transfer_rate(4096, "cpu", "cpu", clock=tick()).value == pytest.approx(4096 / 1e9)


@pytest.mark.parametrize("wait_each", [False, True])
def test_tiny_op_time_is_per_operation(wait_each):
    assert dx.tiny_op_time("cpu", n=40, wait_each=wait_each, clock=tick()).value == \
        pytest.approx(1 / 40)


def test_tiny_op_time_waits_for_each_operation_only_when_asked(monkeypatch):
    waits = []
    monkeypatch.setattr(dx, "synchronize", lambda devices: waits.append(devices))
    dx.tiny_op_time("cpu", n=7, clock=tick())
    assert waits == [], "queued operations: nobody waits in between"
    dx.tiny_op_time("cpu", n=7, wait_each=True, clock=tick())
    assert waits and len(waits) % 7 == 0, "waited for: once after each of the 7"


def test_read_times_reads_random_blocks_then_the_whole_file(monkeypatch, tmp_path):
    sizes, made = [], []

    class Recorded(io.FileIO):   # the notebook's temporary file, its reads counted
        def read(self, size=-1):
            sizes.append(size)
            return super().read(size)

    def temporary_file(**kwargs):
        made.append(Recorded(tmp_path / "f", "w+"))
        return made[-1]

    monkeypatch.setattr(dx.lessons.tempfile, "TemporaryFile", temporary_file)
    block_s, whole_s = dx.read_times(64 * 1024, block=4096, reads=20)
    assert sizes[-1] == 64 * 1024 and set(sizes[:-1]) == {4096} and len(sizes) > 20, sizes
    assert made[0].closed and 0 < block_s.value < 10 and 0 < whole_s < 10


def test_twin_checks_left_the_lesson():
    cells = json.loads(notebook_path("04").read_text(encoding="utf-8"))["cells"]
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "TickClock" not in code, "fake-clock twin checks belong in this test file"


def run_cell(cell_id, **names):
    """Run notebook 04's cell `cell_id` with `names`, dx and torch as globals; return its print."""
    namespace = {"dx": dx, "torch": torch, **names}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(cell_source("04", cell_id), f"<04:{cell_id}>", "exec"), namespace)
    return out.getvalue()


def tf32_off():
    """Whether every switch that lets float32 run as TF32 is off now."""
    return all(getattr(settings, name) == off
               for settings, name, off in parallel._tf32_switches(False))


def fake_sweep(device, dtypes):
    """The notebook's matmul_sweep on a fake GPU: 10 TFLOP/s in every dtype it runs natively."""
    assert tf32_off(), "float32 was swept with TF32 allowed"
    names = [str(dt).removeprefix("torch.") for dt in dtypes]
    return {n: {2048: dx.Band.exact(1e4)} for n in names
            if n != "bfloat16" or dx.dtype_supported(n, device)}


@pytest.mark.parametrize("capability, readings", [
    ((7, 5), ["float32: 10 TFLOP/s (without", "float16: 10 TFLOP/s (on Tensor"]),      # T4
    ((6, 0), ["float32: 10 TFLOP/s (without", "float16: 10 TFLOP/s (without"]),       # P100
    ((9, 0), ["float32: 10 TFLOP/s (without", "float16: 10 TFLOP/s (on Tensor",
              "bfloat16: 10 TFLOP/s (on Tensor"])])                                  # H100
def test_gpu_sweep_says_which_dtypes_ran_on_tensor_cores(monkeypatch, capability, readings):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    cuda = torch.device("cuda", 0)
    with dx.allow_tf32(True):  # a student allowed TF32: the sweep still measures float32
        namespace = {"dx": dx, "torch": torch, "accel": cuda, "matmul_sweep": fake_sweep,
                     "plot_sweep": lambda *args, **kwargs: None}
        exec(compile(cell_source("04", "ab2ca5a9"), "<04:sweep>", "exec"), namespace)
    printed = run_cell("8a9bf16a", accel=cuda, gpus=[cuda], peak=None,
                       gpu_rates=namespace["gpu_rates"])
    lines = printed.splitlines()
    assert len(lines) == len(readings), printed
    for line, reading in zip(lines, readings):
        assert reading in line and "%" not in line, printed   # no data sheet: no share of it


def test_gpu_rates_are_read_against_the_data_sheet(monkeypatch):
    # The sweep ran with TF32 off (dx.allow_tf32), so float32 meets the FP32 peak; a rate above
    # a published peak fails the cell (a measuring error).
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    cuda, h100 = torch.device("cuda", 0), dx.hwbench.published_peak("NVIDIA H100 80GB HBM3")
    rates = {"float32": {2048: 5e4}, "float16": {2048: 5e5}}     # GFLOP/s
    printed = run_cell("8a9bf16a", accel=cuda, gpus=[cuda], gpu_rates=rates, peak=h100)
    assert "float32: 50 TFLOP/s (without Tensor Cores), 75% of 67" in printed
    assert "float16: 500 TFLOP/s (on Tensor Cores), 51% of 989.4" in printed
    with pytest.raises(AssertionError, match="float32 above the data sheet"):
        run_cell("8a9bf16a", accel=cuda, gpus=[cuda], gpu_rates={"float32": {2048: 9e4}},
                 peak=h100)


def fake_roofline(name):
    """dx.roofline on a fake GPU named `name`: a roof carrying its data sheet, if dx knows it."""
    def roofline(device):
        roof = dx.perfmodel.Roof(3000.0, 5e4, published=dx.hwbench.published_peak(name))
        return roof, h100_kernels()
    return roofline


@pytest.mark.parametrize("name, says", [
    ("NVIDIA GeForce RTX 4090 Laptop GPU", "data sheet: none known, so no data-sheet checks"),
    ("NVIDIA H100 80GB HBM3", "data sheet: H100 SXM5 80GB")])
def test_the_gpu_section_names_the_data_sheet_it_holds_rates_to(monkeypatch, name, says):
    # A laptop RTX 4090 (576 GB/s, clocks set by the laptop) once met the desktop card's peaks.
    monkeypatch.setattr(dx, "roofline", fake_roofline(name))
    monkeypatch.setattr(dx, "plot_roofline", lambda *args, **kwargs: None)
    assert run_cell("gpu-decide", accel=torch.device("cuda", 0)) == \
        f"On a GPU: running on cuda:0; {says}\n"


def test_gpu_busy_reads_the_profilers_kernels_against_the_launch_pace(monkeypatch):
    # The queued launches' pace (`queued`) is the slower side's, on a GPU usually the CPU's; the
    # profiler's kernels say how long the GPU itself ran each. 200 traced kernels on a fake GPU.
    def fake_timeline(kernel_s):
        def record_timeline(fn, devices):
            assert len(fn()) == 200 and devices == [torch.device("cuda", 0)]
            launches = [dx.profiling.TimelineEvent("cudaLaunchKernel", "CPU thread 0", i * 1e-5, 4e-6,
                                         "launch") for i in range(200)]
            return launches + [dx.profiling.TimelineEvent("add_", "cuda:0 stream 7", i * 1e-5 + 5e-6,
                                                kernel_s, "kernel") for i in range(200)]
        return record_timeline

    monkeypatch.setattr(torch, "zeros", lambda *shape, device=None: torch.empty(*shape))
    printed = {}
    for kernel_us in (2, 8):
        monkeypatch.setattr(dx, "record_timeline", fake_timeline(kernel_us * 1e-6))
        printed[kernel_us] = run_cell("gpu-busy", accel=torch.device("cuda", 0), queued=1e-5,
                                      sec=dx.format_seconds)
    assert printed[2] == ("the GPU ran each tiny kernel in 2 us: busy 20% of the time between "
                          "two queued launches\n")
    assert "in 8 us: busy 80% of the time" in printed[8]
    # MPS: no CUDA profiler kernels; the cell says nothing and the busy time stays unknown
    namespace = {"dx": dx, "torch": torch, "accel": torch.device("mps"), "queued": 1e-5}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(cell_source("04", "gpu-busy"), "<04:gpu-busy>", "exec"), namespace)
    assert namespace["busy"] is None and out.getvalue() == ""


GPU_SECTION = ["gpu-decide", "5a27282d", "gpu-busy", "ab2ca5a9", "8a9bf16a", "7b7cbc29"]


def test_without_a_gpu_the_gpu_section_prints_one_line():
    # issue 33: a CPU run says once that the GPU cells did not run, not once per cell
    namespace = {"dx": dx, "torch": torch, "accel": None, "gpus": []}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        for cell_id in GPU_SECTION:
            exec(compile(cell_source("04", cell_id), f"<04:{cell_id}>", "exec"), namespace)
    assert out.getvalue() == ("On a GPU: not run here (no GPU); each cell below runs where "
                              "one is present\n")
    # what the latency table and the records file read is defined, empty
    assert [namespace[k] for k in ("gpu_copy", "queued", "waited", "busy", "peak",
                                   "gpu_roof")] == [None] * 6
    assert namespace["gpu_rates"] == {} and namespace["h2d"] == {}


class FakePath:
    """/proc/cpuinfo with the given text, or absent (None), for the notebook's TLB cell."""

    def __init__(self, text):
        self.text = text

    def __call__(self, path):
        assert path == "/proc/cpuinfo"
        return self

    def exists(self):
        return self.text is not None

    def read_text(self):
        return self.text


@pytest.mark.parametrize("cpuinfo, reach, says", [
    ("model name\t: AMD EPYC\nTLB size\t: 3584 4K pages\n", 3584 * 4096, "TLB reach: 14 MiB"),
    ("model name\t: Intel(R) Xeon(R)\nflags\t: fpu\n", 0, "no TLB size reported"),
    (None, 0, "no TLB size reported")])                       # macOS, Windows
def test_tlb_reach_comes_from_the_os_or_is_not_claimed(cpuinfo, reach, says):
    defined = notebook_namespace("04", ["human"])
    defined["MiB"] = MiB              # the set-up cell's, not run here
    human = defined["human"]
    namespace = {"Path": FakePath(cpuinfo), "re": re, "human": human, "MiB": MiB}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(cell_source("04", "tlb"), "<04:tlb>", "exec"), namespace)
    assert namespace["tlb_reach"] == reach and out.getvalue() == says + "\n"


def h100_kernels(add_gbps=3000, mv_gbps=3000, mm_tflops=50):
    """notebook 04's three roofline points at ci sizes on an H100, at the given speeds."""
    n, m, k = 2 ** 24, 2 ** 12, 1024
    counts = [("vector add", n, 12 * n, n, add_gbps * 1e9 / (12 * n)),
              ("matrix-vector", 2 * m * m, 4 * (m * m + 2 * m), m,
               mv_gbps * 1e9 / (4 * (m * m + 2 * m))),
              ("matrix-matrix", 2 * k ** 3, 12 * k * k, k, mm_tflops * 1e12 / (2 * k ** 3))]
    return [dx.hwbench.Kernel(name, flops, nbytes, 1 / calls, size)
            for name, flops, nbytes, size, calls in counts]


@pytest.mark.parametrize("speeds, above", [
    ({}, None),
    ({"mv_gbps": 6000}, None),            # its 67 MB matrix may come partly from the 50 MB L2
    ({"add_gbps": 6000}, "vector add"),   # 201 MB per call: no cache serves that much
    ({"mm_tflops": 90}, "matrix-matrix")])  # above the 67 TFLOP/s of FP32
def test_gpu_roofline_is_held_to_the_data_sheets_roof(speeds, above):
    # dx.roofline does this on a CUDA GPU it knows: the notebook's GPU section relies on it
    peak = dx.hwbench.published_peak("NVIDIA H100 80GB HBM3")
    if above is None:
        dx.hwbench.check_data_sheet(h100_kernels(**speeds), peak)
    else:
        with pytest.raises(AssertionError, match=f"data sheet's roof.*'{above}:"):
            dx.hwbench.check_data_sheet(h100_kernels(**speeds), peak)
