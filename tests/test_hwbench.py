"""hwbench, tested so that the result does not depend on how fast or how busy the machine is.

What the roofline counts (bytes, FLOPs) is checked exactly, on an injected clock; real timings
only against wide physical bounds (positive, below a published peak). Notebook 04's own
measurements are tested in test_nb04_hwbench.py; `make bench` (benchmarks/hwbench_compare.py)
compares them with independent ones and never fails on a ratio.
"""
import shutil
import subprocess
import sys

import pytest
import torch

import d2l_extras as dx
from d2l_extras import hwbench as hb
from d2l_extras import timing
from clocks import TickClock
from conftest import GPUS

MiB = 1024 ** 2
_no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def needs_cuda(test):
    """Skip `test` without a CUDA GPU; mark it `gpu`, so that make gpu-check runs it."""
    return pytest.mark.gpu(_no_cuda(test))

# Every test here on one thread (tests/conftest.py says why).
pytestmark = pytest.mark.usefixtures("one_thread")


# --- the clock and the timing loop

def test_tick_clock_advances_one_step_per_read():
    clock = TickClock(0.5)
    assert [clock(), clock(), clock()] == [0.5, 1.0, 1.5] and clock.reads == 3
    for bad in (0, -1, "1"):
        with pytest.raises(ValueError, match="step > 0"):
            TickClock(bad)


# --- memory

@pytest.mark.skipif(not sys.platform.startswith("linux") or not shutil.which("getconf"),
                    reason="compares sysfs with glibc's getconf (Linux)")
def test_cache_sizes_match_getconf_and_lscpu():
    sizes = hb.cache_sizes()
    assert sizes and set(sizes) <= {"L1d", "L2", "L3", "L4"}
    for key, name in (("L1d", "LEVEL1_DCACHE_SIZE"), ("L2", "LEVEL2_CACHE_SIZE")):
        out = subprocess.run(["getconf", name], capture_output=True, text=True).stdout.strip()
        if out.isdigit() and int(out) > 0 and key in sizes:
            assert sizes[key] == int(out), (key, sizes[key], out)
    # getconf may report the whole chip's L3 (all slices); lscpu -C reports one core's slice
    if shutil.which("lscpu") and "L3" in sizes:
        out = subprocess.run(["lscpu", "-C=NAME,ONE-SIZE", "--bytes"], capture_output=True,
                             text=True).stdout.split()
        if "L3" in out:
            assert sizes["L3"] == int(out[out.index("L3") + 1])


def test_parse_size():
    assert hb._parse_size("48K") == 48 * 1024 and hb._parse_size("32M") == 32 * MiB
    assert hb._parse_size("512") == 512 and hb._parse_size("1024KB") == MiB


# --- the processor

def test_dtype_supported():
    assert hb.dtype_supported("float32", "cpu") and hb.dtype_supported(torch.float64, "cpu")


@pytest.mark.parametrize("name, tensor_cores", [
    ("Tesla T4", ["float16"]), ("Tesla P100-PCIE-16GB", []),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", ["float16", "bfloat16", "tfloat32", "float8"]),
    ("NVIDIA H100 80GB HBM3", ["float16", "bfloat16", "tfloat32", "float8"])])
def test_bfloat16_counts_where_tensor_cores_run_it_not_where_it_is_emulated(fake_gpu, name,
                                                                             tensor_cores):
    dev = fake_gpu(name)
    assert hb.dtype_supported("bfloat16", dev) is ("bfloat16" in tensor_cores)
    assert hb.tensor_core_dtypes(torch.cuda.get_device_capability(dev)) == tensor_cores


def test_tensor_core_dtypes_by_capability():
    assert hb.tensor_core_dtypes((6, 1)) == [] and hb.tensor_core_dtypes([7, 0]) == ["float16"]
    assert hb.tensor_core_dtypes((8, 6)) == ["float16", "bfloat16", "tfloat32"]
    assert hb.tensor_core_dtypes((12, 0)) == list(hb.TENSOR_CORE_DTYPES)   # Blackwell


# --- roofline

def test_roofline_counts_flops_and_bytes_and_probes_the_roof():
    n, k = 2 ** 12, 32
    roof, (add, mv, mm) = hb.roofline(n, k, "cpu", clock=TickClock())  # each call: 1 s
    assert (add.flops, add.bytes, add.size) == (n, 12 * n, n)
    assert (mv.flops, mv.bytes, mv.size) == (2 * 64 ** 2, 4 * (64 ** 2 + 2 * 64), 64)
    assert (mm.flops, mm.bytes, mm.size) == (2 * k ** 3, 12 * k ** 2, k)
    assert add.intensity == pytest.approx(1 / 12) and mm.intensity == pytest.approx(k / 6)
    mv_bytes = 4 * (64 ** 2 + 2 * 64)
    assert roof.probes == pytest.approx({"read": 4 * n / 1e9, "copy": 8 * n / 1e9,
                                         "vector add": 12 * n / 1e9, "matrix-vector": mv_bytes / 1e9,
                                         "matmul": 2 * k ** 3 / 1e9,
                                         "matrix-matrix": 2 * k ** 3 / 1e9})
    # the roof is the best of everything streaming, and of every product, in this run
    # (vector add: the fastest stream here, 12 bytes per element; matmul: the fastest product)
    assert roof.bandwidth_gbps == pytest.approx(roof.probes["vector add"])
    assert roof.peak_gflops == pytest.approx(roof.probes["matmul"])
    assert dx.perfmodel.roof_violations([add, mv, mm], roof) == []
    # a roof taken from elsewhere (here: the copy alone, as 04 once did) puts points above it
    stale = hb.Roof(roof.probes["copy"], roof.peak_gflops)
    assert dx.perfmodel.roof_violations([add, mv, mm], stale) == \
        [f"vector add: {add.gflops:.3g} GFLOP/s > roof {stale.attainable(add.intensity):.3g}"]


def test_roofline_takes_k_from_the_size_policy(monkeypatch):
    monkeypatch.setenv("D2L_PROFILE", "ci")
    _, kernels = hb.roofline(2 ** 10, device="cpu", clock=TickClock())
    assert kernels[2].size == dx.problem_size("roofline_matmul", "cpu") == 256
    assert dx.problem_size("roofline_stream", "cpu") == 2 ** 22


def test_roofline_measures_real_rates():
    roof, kernels = hb.roofline(2 ** 16, 64, "cpu")
    assert all(k.seconds > 0 for k in kernels) and roof.ridge > 0
    assert 0 < roof.bandwidth_gbps < 10_000 and 0 < roof.peak_gflops < 100_000


def test_one_thread_if_busy(monkeypatch):
    threads = torch.get_num_threads()
    try:
        monkeypatch.setattr(hb.psutil, "cpu_percent", lambda interval=None: 10.0)
        assert hb.one_thread_if_busy("cpu") == threads          # quiet: all threads
        monkeypatch.setattr(hb.psutil, "cpu_percent", lambda interval=None: 90.0)
        assert hb.one_thread_if_busy(torch.device("cuda", 0)) == threads  # not the CPU
        assert hb.one_thread_if_busy("cpu") == 1                 # busy: one thread
    finally:
        torch.set_num_threads(threads)


# --- published peaks

@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"), ("NVIDIA H100 PCIe", "H100 PCIe 80GB"),
    ("NVIDIA H100 NVL", "H100 NVL 94GB"), ("NVIDIA H200", "H200 SXM 141GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"), ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla V100S-PCIE-32GB", "V100S PCIe 32GB"),
    ("Tesla P100-PCIE-16GB", "P100 PCIe 16GB"), ("Tesla T4", "T4"), ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA A10", "A10"), ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
    ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"),
    # variants with other clocks, memory or links promise nothing
    ("NVIDIA GeForce RTX 4090 Laptop GPU", None), ("NVIDIA GeForce RTX 4090 D", None),
    ("NVIDIA GeForce RTX 3090 Ti", None), ("NVIDIA A10G", None), ("NVIDIA L40", None),
    ("NVIDIA H200 NVL", None), ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", None),
    ("NVIDIA GeForce RTX 5090", None), ("NVIDIA GH200 480GB", None), ("NVIDIA B200", None),
    ("cpu", None), ("", None)])
def test_published_peak_names_the_gpu_or_says_it_is_unknown(name, expected):
    peak = hb.published_peak(name)
    assert (peak and peak.name) == expected
    if peak:
        assert peak.source and peak.memory_gbps > 0 and peak.tflops["float32"] > 0


def test_published_peak_picks_the_dtypes_figure():
    h100 = hb.published_peak("NVIDIA H100 80GB HBM3")
    assert h100.matmul_tflops("float32") == 67 and h100.matmul_tflops("tfloat32") > 400
    assert h100.matmul_tflops(torch.bfloat16) == pytest.approx(989.4) and h100.l2_mb == 50
    assert h100.matmul_tflops("float8") == pytest.approx(1978.9)
    assert hb.published_peak("Tesla T4").matmul_tflops("bfloat16") is None   # Turing: no bf16
    with pytest.raises(ValueError, match="unknown dtype"):
        h100.matmul_tflops("int8")


def test_every_published_figure_can_be_read():
    for _, peak in hb.PUBLISHED_PEAKS:
        for dtype, tflops in peak.tflops.items():
            assert peak.matmul_tflops(dtype) == tflops, (peak.name, dtype)


@pytest.mark.parametrize("name", GPUS)
def test_a_gpus_peak_figures_are_its_tensor_core_dtypes(fake_gpu, name):
    # A Tensor Core dtype the GPU lacks has no published peak, and one it has, has one.
    dev = fake_gpu(name)
    peak = hb.published_peak(torch.cuda.get_device_name(dev))
    if peak is not None:   # the laptop part has none
        cores = hb.tensor_core_dtypes(torch.cuda.get_device_capability(dev))
        for dtype in ("bfloat16", "tfloat32", "float8"):
            assert (dtype in peak.tflops) == (dtype in cores), (name, dtype)


@needs_cuda
def test_measure_waits_for_the_gpu():
    # torch.cuda._sleep(cycles) spins one kernel for that many GPU clock cycles: 10**7 of them
    # last 2.9 ms or more on a GPU clocked at 3.5 GHz or less (all are). A timer that did not
    # wait for the GPU would report the microseconds it takes to queue the kernel.
    dev = torch.device("cuda", 0)
    m = dx.measure(lambda: torch.cuda._sleep(10 ** 7), devices=[dev])
    assert m.median >= 10 ** 7 / 3.5e9 and m.cold >= 10 ** 7 / 3.5e9


@needs_cuda
def test_gpu_launch_overhead_is_physical():
    dev = torch.device("cuda", 0)
    # notebook 04's tiny_op_time: a launch is at least 100 ns of CPU work and well under a
    # millisecond; waiting for each adds a round trip through the driver, which takes no GPU 10 ms
    assert 1e-7 < dx.tiny_op_time(dev, 200).value < 1e-3
    assert 1e-7 < dx.tiny_op_time(dev, 50, wait_each=True).value < 1e-2


@needs_cuda
def test_gpu_rates_are_below_the_published_peak():
    dev = torch.device("cuda", 0)
    name = torch.cuda.get_device_name(dev)
    peak = hb.published_peak(name)
    if peak is None:
        pytest.skip(f"no published peak for {name}: nothing to hold its rates to")
    # notebook 04's measurements; 256 MiB is far beyond any L2 cache, which could serve less faster
    pinned, pageable = (dx.transfer_rate(64 * MiB, "cpu", dev, p).value for p in (True, False))
    copy = dx.copy_rate(256 * MiB, dev).value
    with dx.allow_tf32(False):  # float32 in float32: the data sheet's FP32 figure applies
        mm = dx.matmul_gflops(2048, torch.float32, dev).value
    # 5 %: boost clocks and rounding in the data sheets
    assert 0 < max(pinned, pageable) <= 1.05 * peak.host_link_gbps
    assert copy <= 1.05 * peak.memory_gbps and mm <= 1.05 * 1e3 * peak.matmul_tflops("float32")


# --- bad input says what is valid

@pytest.mark.parametrize("dtype", ["float8", "int32", "double", torch.int64, None])
def test_unknown_dtype_raises(dtype):
    with pytest.raises(ValueError, match="unknown dtype .* use one of float64, float32"):
        hb.dtype_supported(dtype, "cpu")


def test_exported_from_package():
    assert dx.dtype_supported is hb.dtype_supported and dx.plot_roofline
    assert dx.measure is timing.measure and dx.roofline is hb.roofline


def test_plot_roofline_draws_roof_and_kernels():
    import matplotlib.pyplot as plt
    kernels = [hb.Kernel("add", 1.0, 12.0, 1e-3), hb.Kernel("mm", 2e6, 1.2e4, 1e-3)]
    ax = dx.plot_roofline(10.0, 100.0, kernels, title="t")
    roof = ax.lines[0]
    xs, ys = roof.get_data()
    assert max(ys) == pytest.approx(100.0) and ys[0] == pytest.approx(10.0 * xs[0])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["add", "mm"]
    assert "memory 10 GB/s" in [t.get_text() for t in ax.texts]
    plt.close(ax.figure)


def test_geforce_16_bit_peaks_are_the_fp32_accumulate_figures():
    # torch.mm accumulates float16 products in float32: the whitepapers' FP32-accumulate column
    # (the FP16-accumulate one is twice as high on GeForce cards).
    assert hb.published_peak("NVIDIA GeForce RTX 4090").matmul_tflops("float16") == 165.2
    assert hb.published_peak("NVIDIA GeForce RTX 3090").matmul_tflops("float16") == 71
    for name in ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"):
        peak = hb.published_peak(name)
        assert peak.matmul_tflops("float16") == peak.matmul_tflops("bfloat16")


def test_check_data_sheet_flags_points_above_a_gpus_published_roof():
    h100 = hb.published_peak("NVIDIA H100 80GB HBM3")     # 3350 GB/s, 67 TFLOP/s, 50 MB of L2
    n = 2 ** 26                                           # a vector add of 805 MB: no cache helps
    add = lambda gbps: hb.Kernel("vector add", n, 12 * n, 12 * n / (gbps * 1e9), n)
    mm = lambda tflops: hb.Kernel("matrix-matrix", 2 * 8192 ** 3, 12 * 8192 ** 2,
                                  2 * 8192 ** 3 / (tflops * 1e12), 8192)
    hb.check_data_sheet([add(3000), mm(60)], h100)        # under the roof: silent
    hb.check_data_sheet([add(9000), mm(900)], None)       # unknown GPU: nothing to hold them to
    with pytest.raises(AssertionError, match=r"H100 SXM5 80GB's data sheet.*vector add"):
        hb.check_data_sheet([add(4000), mm(60)], h100)
    with pytest.raises(AssertionError, match=r"matrix-matrix"):
        hb.check_data_sheet([add(3000), mm(90)], h100)    # TF32 speed counted as float32


def test_roofline_on_the_cpu_names_no_data_sheet():
    roof, _ = hb.roofline(2 ** 10, 16, "cpu", clock=TickClock())
    assert roof.published is None
