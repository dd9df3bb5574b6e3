"""This machine's hardware facts: dtypes, cache sizes, load, the roofline, published GPU peaks."""
import math
import pathlib
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Sequence

import psutil
import torch

from .hardware import default_device, fit_to_memory
from .parallel import allow_tf32
from .perfmodel import GB, Kernel, Roof, roof_violations
from .sizes import problem_size
from .timing import Clock, measure_interleaved

Device = torch.device | str | None
DTYPES = {str(t)[6:]: t for t in (torch.float64, torch.float32, torch.bfloat16, torch.float16)}


def _as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    found = DTYPES.get(dtype) if isinstance(dtype, str) else dtype
    if found not in DTYPES.values():
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return found


def _as_device(device: Device) -> torch.device:
    return default_device() if device is None else torch.device(device)


def one_thread_if_busy(device: Device = "cpu", busy: float = 0.5) -> int:
    """On a CPU whose cores are busy now (other programs), time on one thread; return the count."""
    # A core another program holds makes every operator split over all cores wait for it.
    # Sampled now: the minute's load average would still count a finished job.
    if _as_device(device).type == "cpu" and psutil.cpu_percent(interval=0.25) >= 100 * busy:
        torch.set_num_threads(1)
    return torch.get_num_threads()


def _parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B")   # sysfs writes "48K", "2048K", "32M"
    return int(text.rstrip("KMG")) * 1024 ** ("KMG".find(text[-1]) + 1)


def cache_sizes() -> dict[str, int] | None:
    """The data-cache sizes in bytes the OS reports for one core (L1d, L2, L3), or None."""
    found: dict[str, int] = {}
    try:
        if sys.platform.startswith("linux"):
            for d in sorted(pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
                kind, level, size = ((d / f).read_text().strip() for f in ("type", "level", "size"))
                if kind in ("Data", "Unified"):
                    found["L1d" if level == "1" else f"L{level}"] = _parse_size(size)
        elif sys.platform == "darwin":
            for name in ("L1d", "L2", "L3"):  # Apple silicon's per core cluster (perflevel0) wins
                outs = (subprocess.run(["sysctl", "-n", f"hw.{level}{name.lower()}cachesize"],
                                       capture_output=True, text=True, timeout=5).stdout.strip()
                        for level in ("", "perflevel0."))
                found |= {name: int(out) for out in outs if out.isdigit()}  # a missing key: ""
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return found or None


# Tensor Core dtypes and the compute capability that brought each (CUDA C++ Programming Guide)
TENSOR_CORE_DTYPES: dict[str, tuple[int, int]] = {
    "float16": (7, 0), "bfloat16": (8, 0), "tfloat32": (8, 0), "float8": (8, 9)}


def tensor_core_dtypes(capability: tuple[int, int]) -> list[str]:
    """The dtypes a CUDA GPU of compute capability (major, minor) multiplies on Tensor Cores."""
    return [name for name, since in TENSOR_CORE_DTYPES.items() if tuple(capability) >= since]


def dtype_supported(dtype: str | torch.dtype, device: Device = None) -> bool:
    """Whether this device multiplies matrices in this dtype natively (emulation does not count)."""
    dtype, device = _as_dtype(dtype), _as_device(device)
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.version.hip:
        # is_bf16_supported() says True on a T4, which only emulates it: ask this GPU's capability
        return "bfloat16" in tensor_core_dtypes(torch.cuda.get_device_capability(device))
    try:  # an Apple GPU refuses float64 tensors (TypeError)
        a = torch.ones(4, 4, dtype=dtype, device=device)
        return bool(torch.isfinite((a @ a).float()).all())
    except (RuntimeError, TypeError):
        return False


def roofline(n: int | None = None, k: int | None = None, device: Device = "cpu", *,
             clock: Clock = time.perf_counter) -> tuple[Roof, list[Kernel]]:
    """Vector add (n), matrix-vector (sqrt n), matrix-matrix (k) in float32, and their roof."""
    device = _as_device(device)  # n and k (tests pass them): else the size policy's, which fit
    # x, y, z and an m x m matrix with m * m <= n: at most 16 bytes per element of n
    n = fit_to_memory(n or problem_size("roofline_stream", device), 16, device, 0.25)
    m = math.isqrt(n)
    x, y, z, A, v, w = (torch.rand(size, device=device) for size in (n, n, n, (m, m), m, m))
    # The matmul is sized after the vectors exist, so that its share of free memory is real.
    k = k or problem_size("roofline_matmul", device)
    P, Q, R = (torch.rand(k, k, device=device) for _ in range(3))
    s = torch.empty((), device=device)
    # name: (call, FLOPs, bytes, size); read, copy and matmul only probe the roof
    jobs = {"read": (lambda: torch.sum(x, 0, out=s), 0, 4 * n, n),
            "copy": (lambda: y.copy_(x), 0, 2 * 4 * n, n),
            "matmul": (lambda: torch.mm(P, Q, out=R), 2 * k ** 3, 0, k),
            "vector add": (lambda: torch.add(x, y, out=z), n, 3 * 4 * n, n),
            "matrix-vector": (lambda: torch.mv(A, v, out=w), 2 * m * m, 4 * (m * m + 2 * m), m),
            "matrix-matrix": (lambda: torch.mm(P, Q, out=R), 2 * k ** 3, 3 * 4 * k * k, k)}
    # In turns, in runs of equal length: a burst of load slows probes and kernels alike. Products
    # in true float32 (TF32 off), the dtype of the roof and of a data sheet's FP32 peak.
    with allow_tf32(False):
        timed = measure_interleaved({name: job[0] for name, job in jobs.items()},
                                    devices=[device], balance=True, clock=clock)
    kernels = [Kernel(name, flops, nbytes, timed[name].median, size, timed[name].band)
               for name, (_, flops, nbytes, size) in list(jobs.items())[3:]]
    # The roof: the best repeat of everything in this run, kernels too: on some CPUs a vector
    # add streams faster than a sum or a copy, and would sit above a roof set by those.
    products = ("matmul", "matrix-matrix")
    best = {name: job[1 if name in products else 2] / timed[name].best / GB
            for name, job in jobs.items()}
    streams = [gbps for name, gbps in best.items() if name not in products]
    roof = Roof(max(streams), max(best[p] for p in products), best)
    if device.type == "cuda":
        roof.published = published_peak(torch.cuda.get_device_name(device))
        check_data_sheet(kernels, roof.published)
    return roof, kernels


def check_data_sheet(kernels: Sequence[Kernel], peak: "GpuPeak | None") -> None:
    """Raise if a float32 kernel lies above the GPU's published roof: a measuring error."""
    if peak is None or peak.matmul_tflops("float32") is None:
        return  # a GPU not in the table: nothing to hold the points to
    sheet = Roof(peak.memory_gbps, 1e3 * peak.matmul_tflops("float32"))
    # the L2 cache may serve up to its size of a kernel's bytes between calls
    above = roof_violations(kernels, sheet, 0.05, cache_bytes=peak.l2_mb * 1e6)
    if above:
        raise AssertionError(f"points above the {peak.name}'s data sheet's roof "
                             f"({peak.source}): {above}; a measuring error")


@dataclass(frozen=True)
class GpuPeak:
    """A GPU's published peaks: memory GB/s, dense TFLOP/s by dtype, host link GB/s each way."""

    name: str
    memory_gbps: float
    tflops: dict            # dtype -> dense TFLOP/s (no sparsity); "tfloat32" and "float8" too
    host_link_gbps: float   # PCIe x16 per direction: gen3 15.75, gen4 31.5, gen5 63 GB/s (PCI-SIG)
    l2_mb: float
    source: str

    def matmul_tflops(self, dtype: str | torch.dtype) -> float | None:
        """Published dense peak for a matmul in dtype ("tfloat32" and "float8" too), or None."""
        name = dtype if dtype in ("tfloat32", "float8") else str(_as_dtype(dtype))[6:]
        return self.tflops.get(name)


_PEAK_DTYPES = ("float64", "float32", "tfloat32", "bfloat16", "float16", "float8")
_H100 = (34, 67, 494.7, 989.4, 989.4, 1978.9)  # the H200 has the same compute
_A100 = (9.7, 19.5, 156, 312, 312, None)
_VOLTA = (None, None)  # tfloat32, bfloat16: none before Ampere
_ADA = "NVIDIA Ada Lovelace architecture whitepaper (2022), appendix A"
_GA102 = "NVIDIA Ampere GA102 architecture whitepaper (2020), appendix A"
# A pattern matches the whole name torch.cuda.get_device_name() reports: variants (laptop part,
# RTX 4090 D, A10G, MIG slice; GH200, B200, RTX 50xx lack one figure per name) get nothing.
# Columns: pattern, name, memory GB/s, host link GB/s, L2 MB, source (".../": a data sheet page),
# dense TFLOP/s per _PEAK_DTYPES (None: unpublished; sparse halved). GeForce float16 and bfloat16:
# the FP32-accumulate figures, as torch.mm accumulates 16-bit products in float32 (the FP16-accumulate
# figures, twice as high, do not apply).
_PEAKS = [
    (r"H100 80GB HBM3|H100 SXM5?( 80GB)?", "H100 SXM5 80GB", 3350, 63, 50, "h100/", _H100),
    (r"H100( 80GB)? PCIe", "H100 PCIe 80GB", 2000, 63, 50, "h100/", (26, 51, 378, 756, 756, 1513)),
    (r"H100 NVL", "H100 NVL 94GB", 3900, 63, 50, "h100/", (30, 60, 417.5, 835.5, 835.5, 1670.5)),
    (r"H200( SXM)?( 141GB)?", "H200 SXM 141GB", 4800, 63, 50, "h200/", _H100),
    (r"A100-SXM4-80GB", "A100 SXM4 80GB", 2039, 31.5, 40, "a100/", _A100),
    (r"A100 80GB PCIe|A100-PCIE-80GB", "A100 PCIe 80GB", 1935, 31.5, 40, "a100/", _A100),
    (r"A100-(SXM4|PCIE)-40GB", "A100 40GB", 1555, 31.5, 40, "a100/", _A100),
    (r"V100S-PCIE-32GB", "V100S PCIe 32GB", 1134, 15.75, 6, "v100/",
     (8.2, 16.4, *_VOLTA, 130, None)),
    (r"V100-SXM2-(16|32)GB", "V100 SXM2", 900, 15.75, 6, "v100/", (7.8, 15.7, *_VOLTA, 125, None)),
    (r"V100-PCIE-(16|32)GB", "V100 PCIe", 900, 15.75, 6, "v100/", (7, 14, *_VOLTA, 112, None)),
    # Pascal: no Tensor Cores; float16 runs at twice the float32 rate on the CUDA cores.
    (r"P100-PCIE-16GB", "P100 PCIe 16GB", 732, 15.75, 4, "tesla-p100/",
     (4.7, 9.3, *_VOLTA, 18.7, None)),
    (r"T4", "T4", 320, 15.75, 4, "tesla-t4/", (None, 8.1, None, None, 65, None)),
    (r"L4", "L4", 300, 31.5, 48, "l4/", (None, 30.3, 60, 121, 121, 242.5)),
    (r"L40S", "L40S", 864, 31.5, 96, "l40s/", (None, 91.6, 183, 362.05, 362.05, 733)),
    (r"A10", "A10", 600, 31.5, 6, "products/a10-gpu/", (None, 31.2, 62.5, 125, 125, None)),
    (r"RTX 4090", "GeForce RTX 4090", 1008, 31.5, 72, _ADA, (None, 82.6, 82.6, 165.2, 165.2, None)),
    (r"RTX 3090", "GeForce RTX 3090", 936, 31.5, 6, _GA102, (None, 35.6, 35.6, 71, 71, None)),
]
PUBLISHED_PEAKS: list[tuple[str, GpuPeak]] = [
    (pattern, GpuPeak(name, memory, {d: t for d, t in zip(_PEAK_DTYPES, tflops) if t is not None},
                      link, l2, "NVIDIA data sheet: https://www.nvidia.com/en-us/data-center/"
                      + source if source.endswith("/") else source))
    for pattern, name, memory, link, l2, source, tflops in _PEAKS]


def published_peak(device_name: str) -> GpuPeak | None:
    """The published peaks of the GPU named `device_name`, or None for a GPU not in the table."""
    name = " ".join(device_name.split())
    return next((peak for pattern, peak in PUBLISHED_PEAKS
                 if re.fullmatch(rf"(NVIDIA |Tesla )?(GeForce )?({pattern})", name, re.I)), None)
