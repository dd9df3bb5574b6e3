"""Measure this machine: memory, caches, vector units, matmul, storage, GPU links (bounded).

Each measurement is a few lines around `timing.measure` (the first call apart, then warm runs
until their spread is small or the profile's time cap is spent), and keeps the Measurement, so
that every rate comes with its band. Every function takes `clock=`: tests pass a `TickClock` to
check what is counted (bytes, FLOPs, elements) exactly, with no dependence on how fast or how
busy the machine is.
"""
from __future__ import annotations

import math
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch

from .checks import whole_number
from .hardware import default_device, fit_to_memory
from .profiles import by_profile
from .sizes import problem_size
from .bands import Band
from .perfmodel import GB, Kernel, Roof
from .timing import Clock, Measurement, TickClock, measure, measure_interleaved, synchronize

KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3

DTYPES = {"float64": torch.float64, "float32": torch.float32,
          "bfloat16": torch.bfloat16, "float16": torch.float16}



# --- argument checks: every public function rejects nonsense with a message saying what is valid

def _as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")


def _as_device(device: torch.device | str | None) -> torch.device:
    if device is None:
        return default_device()
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda:0', 'mps' ...") from err


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# --- timing: every measurement below is one call of timing.measure (or measure_interleaved)

def machine_load(interval: float | None = None) -> float | None:
    """How busy the CPU is: runnable processes per core over the last minute, or None.

    With `interval` (seconds), the share of all cores' time that was busy during that interval,
    from 0 to 1, sampled now: the minute's average still counts a notebook that has ended.
    """
    if interval is not None:
        import psutil

        if not (isinstance(interval, (int, float)) and 0 < interval <= 10):
            raise ValueError(f"machine_load(): interval is a number of seconds in (0, 10], "
                             f"got {interval!r}")
        return psutil.cpu_percent(interval=interval) / 100
    if not hasattr(os, "getloadavg"):
        return None
    return os.getloadavg()[0] / (os.cpu_count() or 1)


def one_thread_if_busy(device: torch.device | str = "cpu", busy: float = 0.5) -> int:
    """On a CPU whose cores are busy now (other programs), time on one thread; return the count.

    An operator split over every core waits for its slowest thread, and a core that another
    program holds makes every such operator a straggler: timings scatter by factors. One thread
    loses its core now and then, but evenly. On a quiet machine, or an accelerator, no change.
    """
    if _as_device(device).type == "cpu" and machine_load(0.25) >= busy:
        torch.set_num_threads(1)
    return torch.get_num_threads()


@dataclass
class Rate:
    """Work done per call (bytes moved or floating point operations) and the measured calls."""

    name: str
    amount: float      # bytes or FLOPs per call
    time: Measurement  # seconds per call: median and spread
    unit: str = "B"    # "B" for bytes, "FLOP" for floating point operations
    extra: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Median seconds per call."""
        return self.time.median

    @property
    def band(self) -> Band:
        """Units per second: the median rate and the band the runs spread over."""
        return self.amount / self.time.band

    @property
    def per_second(self) -> float:
        """Rate in units per second (of the median call)."""
        return self.amount / self.seconds

    @property
    def giga(self) -> float:
        """Rate in GB/s or GFLOP/s (decimal giga)."""
        return self.per_second / GB

    def __str__(self) -> str:
        return f"{self.name}: {self.giga:.3g} G{self.unit}/s ±{self.time.spread:.0%}"


# --- memory

def copy_bandwidth(n_bytes: int | None = None, device: torch.device | str | None = "cpu", *,
                   clock: Clock = time.perf_counter) -> Rate:
    """Copy one buffer into another; bytes read plus bytes written per second (STREAM 'copy')."""
    device = _as_device(device)
    if n_bytes is None:  # beyond most CPUs' last-level cache, so this is RAM (or GPU memory)
        n_bytes = by_profile(64 * MiB, 256 * MiB, 1 * GiB)
    n = fit_to_memory(whole_number(n_bytes, "n_bytes") // 4 or 1, 8, device, fraction=0.25)
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    m = measure(lambda: dst.copy_(src), "copy", devices=[device], clock=clock)
    return Rate(f"copy on {device}", 2 * src.nbytes, m, "B", {"n_bytes": src.nbytes})


@dataclass
class Gather:
    """Seconds per element to gather with random indices and with contiguous (burst) ones."""

    n: int
    source_bytes: int
    random: Band        # seconds per element: median and interquartile range
    contiguous: Band

    @property
    def random_s(self) -> float:
        """Median seconds per element, random indices."""
        return self.random.value

    @property
    def contiguous_s(self) -> float:
        """Median seconds per element, consecutive indices."""
        return self.contiguous.value

    @property
    def ratio(self) -> Band:
        """How many times slower a random read is than a burst read."""
        return self.random / self.contiguous


def gather_time(n: int | None = None, source_bytes: int | None = None,
                device: torch.device | str | None = "cpu", *,
                clock: Clock = time.perf_counter) -> Gather:
    """Gather n float32 values from a large source: random indices vs consecutive ones."""
    device = _as_device(device)
    n = whole_number(n if n is not None else by_profile(2 ** 20, 2 ** 22, 2 ** 24), "n")
    if source_bytes is None:
        source_bytes = by_profile(128 * MiB, 512 * MiB, 1 * GiB)
    size = fit_to_memory(whole_number(source_bytes, "source_bytes") // 4 or 1, 4, device, 0.25)
    n = fit_to_memory(n, 4 + 8, device, 0.1)
    source = torch.rand(size, device=device)
    out = torch.empty(n, device=device)
    gen = torch.Generator().manual_seed(0)
    scattered = torch.randint(0, size, (n,), generator=gen).to(device)
    consecutive = (torch.arange(n) % size).to(device)
    rand = measure(lambda: torch.index_select(source, 0, scattered, out=out), "random",
                   devices=[device], clock=clock)
    cont = measure(lambda: torch.index_select(source, 0, consecutive, out=out), "contiguous",
                   devices=[device], clock=clock)
    return Gather(n, source.nbytes, rand.band / n, cont.band / n)


@dataclass
class CacheSweep:
    """Seconds per random read against the working-set size it was drawn from."""

    sizes: list[int]
    seconds: list[float]
    device: str


def default_sweep_sizes(largest: int | None = None) -> list[int]:
    """Working sets from 4 KiB to beyond the last-level cache, capped by the profile."""
    if largest is None:
        llc = max((cache_sizes() or {}).values(), default=32 * MiB)
        # Some servers (and VMs) report hundreds of MiB of L3: the cap keeps ci and class quick.
        largest = min(max(4 * llc, 64 * MiB), by_profile(64 * MiB, 512 * MiB, 16 * GiB),
                      fit_to_memory(16 * GiB, 1, "cpu", 0.25))   # and a quarter of free RAM
    step = by_profile(4, 2, 2)
    sizes, s = [], 4 * KiB
    while s <= whole_number(largest, "largest"):
        sizes.append(s)
        s *= step
    return sizes


def cache_sweep(sizes: Sequence[int] | None = None, lookups: int | None = None,
                device: torch.device | str | None = "cpu", *,
                clock: Clock = time.perf_counter) -> CacheSweep:
    """Time random reads inside working sets of growing size: steps appear at each cache size."""
    device = _as_device(device)
    sizes = list(default_sweep_sizes() if sizes is None else sizes)
    if not sizes:
        raise ValueError("cache_sweep needs at least one working-set size in bytes")
    for s in sizes:
        whole_number(s, "working-set size")
    lookups = whole_number(lookups if lookups is not None else
                           by_profile(2 ** 18, 2 ** 20, 2 ** 22), "lookups")
    largest = fit_to_memory(max(sizes) // 4 or 1, 4, device, 0.25)
    gen = torch.Generator().manual_seed(0)
    out = torch.empty(lookups, device=device)
    result, actual = [], []
    for s in sizes:
        n = max(1, min(s // 4, largest))
        actual.append(4 * n)
        source = torch.rand(n, device=device)
        # int32 indices: fewer bytes streaming past the cache we are trying to observe
        idx = torch.randint(0, n, (lookups,), generator=gen, dtype=torch.int32).to(device)
        m = measure(lambda: torch.index_select(source, 0, idx, out=out), f"{s}",
                    devices=[device], clock=clock)
        result.append(m.median / lookups)
        del source, idx
    return CacheSweep(actual, result, str(device))


def _parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B")
    scale = {"K": KiB, "M": MiB, "G": GiB}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _read_text(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read().strip()


def cache_sizes() -> dict[str, int] | None:
    """The data-cache sizes in bytes the OS reports for one core (L1d, L2, L3), or None."""
    found: dict[str, int] = {}
    if sys.platform.startswith("linux"):
        base = "/sys/devices/system/cpu/cpu0/cache"
        try:
            for entry in sorted(os.listdir(base)):
                if not entry.startswith("index"):
                    continue
                kind, level = (_read_text(os.path.join(base, entry, f)) for f in ("type", "level"))
                if kind in ("Data", "Unified"):
                    size = _read_text(os.path.join(base, entry, "size"))
                    found["L1d" if level == "1" else f"L{level}"] = _parse_size(size)
        except (OSError, ValueError):
            return None
    elif sys.platform == "darwin":
        for key, name in (("l1dcachesize", "L1d"), ("l2cachesize", "L2"),
                          ("l3cachesize", "L3")):
            for prefix in ("hw.perflevel0.", "hw."):  # Apple silicon reports per core cluster
                try:
                    out = subprocess.run(["sysctl", "-n", prefix + key], capture_output=True,
                                         text=True, timeout=5)
                    if out.returncode == 0 and out.stdout.strip().isdigit():
                        found[name] = int(out.stdout.strip())
                        break
                except (OSError, subprocess.SubprocessError):
                    pass
    return found or None


# --- the processor: loops, vector units, matrix multiply

@dataclass
class LoopVsVector:
    """Seconds per element of y = a*x + y: a Python loop against one vectorized operation."""

    n: int
    loop: Band          # seconds per element: median and interquartile range
    vector: Band

    @property
    def loop_s(self) -> float:
        """Median seconds per element of the Python loop."""
        return self.loop.value

    @property
    def vector_s(self) -> float:
        """Median seconds per element of the vectorized operation."""
        return self.vector.value

    @property
    def speedup(self) -> Band:
        """How many times faster the vectorized version is."""
        return self.loop / self.vector


def loop_vs_vectorized(n: int | None = None, *,
                       clock: Clock = time.perf_counter) -> LoopVsVector:
    """Time a*x + y elementwise in a Python loop and as one torch operation on the CPU."""
    n = whole_number(n if n is not None else by_profile(10 ** 6, 10 ** 6, 10 ** 7), "n")
    x, y = torch.rand(n), torch.rand(n)
    xs, ys, out = x.tolist(), y.tolist(), [0.0] * n

    def loop():
        for i in range(n):
            out[i] = 2.0 * xs[i] + ys[i]

    def vector():
        return torch.add(y, x, alpha=2.0)

    lm = measure(loop, "loop", devices=[], clock=clock)
    vm = measure(vector, "vector", devices=[], clock=clock)
    # Same arithmetic, so the same numbers (torch.testing would import a lot; allclose will do).
    if not torch.allclose(torch.tensor(out, dtype=torch.float32), vector()):
        raise AssertionError("the loop and the vectorized a*x + y disagree")
    return LoopVsVector(n, lm.band / n, vm.band / n)


# The dtypes a CUDA GPU multiplies on its Tensor Cores, and the compute capability that brought
# each (NVIDIA CUDA C++ Programming Guide, "Compute Capabilities"): float16 with Volta (7.0) and
# Turing (7.5), bfloat16 and TF32 with Ampere (8.0), FP8 with Ada (8.9) and Hopper (9.0). Pascal
# (6.x: P100, GTX 10xx) and older have none. "tfloat32" is float32 rounded to TF32 on the way in.
TENSOR_CORE_DTYPES: dict[str, tuple[int, int]] = {
    "float16": (7, 0), "bfloat16": (8, 0), "tfloat32": (8, 0), "float8": (8, 9)}


def tensor_core_dtypes(capability: tuple[int, int]) -> list[str]:
    """The dtypes a CUDA GPU of compute capability (major, minor) multiplies on Tensor Cores."""
    try:
        major, minor = capability
        key = (whole_number(major, "major", 0), whole_number(minor, "minor", 0))
    except (TypeError, ValueError) as err:
        raise ValueError(f"capability is (major, minor), as torch.cuda.get_device_capability(0) "
                         f"returns it, e.g. (7, 5) for a T4; got {capability!r}") from err
    return [name for name, since in TENSOR_CORE_DTYPES.items() if key >= since]


def dtype_supported(dtype: str | torch.dtype, device: torch.device | str | None = None) -> bool:
    """Whether this device multiplies matrices in this dtype natively (emulation does not count)."""
    dtype, device = _as_dtype(dtype), _as_device(device)
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.version.hip:
        # torch.cuda.is_bf16_supported() says True on Turing (a T4), which only emulates
        # bfloat16, and it asks about the current GPU, not this one: ask this one's capability.
        capability = torch.cuda.get_device_capability(device)
        return "bfloat16" in tensor_core_dtypes(capability)
    if device.type == "mps" and dtype == torch.float64:
        return False  # Apple GPUs have no float64
    try:
        a = torch.ones(4, 4, dtype=dtype, device=device)
        return bool(torch.isfinite((a @ a).float()).all())
    except (RuntimeError, TypeError):
        return False


def matmul_rate(n: int, dtype: str | torch.dtype = "float32",
                device: torch.device | str | None = None, *,
                clock: Clock = time.perf_counter) -> Rate:
    """FLOP/s of an n x n matrix product (2 n^3 operations per call)."""
    n, dtype, device = whole_number(n, "n"), _as_dtype(dtype), _as_device(device)
    if not dtype_supported(dtype, device):
        raise ValueError(f"{_dtype_name(dtype)} matrix multiply is not supported natively on "
                         f"{device}; dtype_supported() says which dtypes are")
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if fit_to_memory(n * n, 3 * itemsize, device, 0.5, minimum=1) < n * n:
        raise ValueError(f"{n} x {n} {_dtype_name(dtype)} matrices do not fit in half of the "
                         f"free memory of {device}; pick a smaller n")
    a = torch.rand(n, n, device=device).to(dtype)
    b = torch.rand(n, n, device=device).to(dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    m = measure(lambda: torch.mm(a, b, out=c), f"{n}", devices=[device], clock=clock)
    return Rate(f"matmul {n} {_dtype_name(dtype)}", 2 * n ** 3, m, "FLOP",
                {"n": n, "dtype": _dtype_name(dtype)})


def matmul_sweep(sizes: Sequence[int] | None = None,
                 dtypes: Sequence[str | torch.dtype] = ("float64", "float32", "bfloat16"),
                 device: torch.device | str | None = None, *,
                 clock: Clock = time.perf_counter) -> list[Rate]:
    """matmul_rate for every size and every dtype this device runs natively (others are skipped)."""
    device = _as_device(device)
    if sizes is None:
        sizes = default_matmul_sizes(device)
    if not sizes or not dtypes:
        raise ValueError("matmul_sweep needs at least one size and one dtype")
    rates = []
    for dtype in dtypes:
        if not dtype_supported(dtype, device):
            continue
        itemsize = torch.empty(0, dtype=_as_dtype(dtype)).element_size()
        for n in sizes:
            if fit_to_memory(n * n, 3 * itemsize, device, 0.5) < n * n:
                break  # larger sizes do not fit either
            rates.append(matmul_rate(n, dtype, device, clock=clock))
    return rates


def default_matmul_sizes(device: torch.device | str | None = None) -> list[int]:
    """Matrix sides from 64 up to the profile's largest for this kind of device that fit memory."""
    # The size policy's "matmul_sweep" entry: the profile's largest side for this kind of
    # device, shrunk so that the sweep's four float32 matrices fit half the free memory.
    top = problem_size("matmul_sweep", _as_device(device))
    return [s for s in (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384) if s <= top]


# --- the roofline measured: which operations the memory limits and which the arithmetic
# limits (the model, Kernel and Roof, is in perfmodel.py)

def roofline(n: int | None = None, k: int | None = None,
             device: torch.device | str | None = "cpu", *,
             clock: Clock = time.perf_counter) -> tuple[Roof, list[Kernel]]:
    """Measure vector add (n), matrix-vector (sqrt n) and matrix-matrix (k) products in float32,
    and the roof they live under, measured with them in the same run: the best repeat of a
    streaming read, a copy and the streaming kernels (GB/s), and of the k x k products (GFLOP/s),
    all timed in turns.
    """
    device = _as_device(device)
    n = whole_number(n, "n") if n is not None else problem_size("roofline_stream", device)
    # x, y, z and an m x m matrix with m*m <= n: 16 bytes per element of n at most
    n = fit_to_memory(n, 16, device, 0.25)
    m = max(1, math.isqrt(n))                # the matrix-vector product reads an m x m matrix
    x, y, z = (torch.rand(n, device=device) for _ in range(3))
    A, v, w = torch.rand(m, m, device=device), torch.rand(m, device=device), \
        torch.empty(m, device=device)
    # The matmul is sized after the vectors exist, so that its share of free memory is real.
    k = whole_number(k, "k") if k is not None else problem_size("roofline_matmul", device)
    if fit_to_memory(k * k, 3 * 4, device, 0.5, minimum=1) < k * k:
        raise ValueError(f"three {k} x {k} float32 matrices do not fit in half of the free "
                         f"memory of {device}; pick a smaller k")
    P, Q, R = (torch.rand(k, k, device=device) for _ in range(3))
    s = torch.empty((), device=device)
    probes = {"read": (lambda: torch.sum(x, 0, out=s), 4 * n),      # reads x once
              "copy": (lambda: y.copy_(x), 2 * 4 * n),             # reads x, writes y
              "matmul": (lambda: torch.mm(P, Q, out=R), 2 * k ** 3)}
    jobs = [("vector add", lambda: torch.add(x, y, out=z), n, 3 * 4 * n, n),
            ("matrix-vector", lambda: torch.mv(A, v, out=w), 2 * m * m, 4 * (m * m + 2 * m), m),
            ("matrix-matrix", lambda: torch.mm(P, Q, out=R), 2 * k ** 3, 3 * 4 * k * k, k)]
    fns = {name: fn for name, (fn, _) in probes.items()}
    fns.update({name: fn for name, fn, *_ in jobs})
    # Timed in turns, in runs of equal length: a burst of load from other programs then slows
    # probes and kernels alike, instead of lowering the roof alone.
    timed = measure_interleaved(fns, devices=[device], balance=True, clock=clock)
    times = {name: m.warm for name, m in timed.items()}
    kernels = [Kernel(name, flops, nbytes, timed[name].median, size, timed[name].band)
               for name, _, flops, nbytes, size in jobs]
    # The roof is the best repeat of everything that streams (GB/s) and of every product
    # (GFLOP/s) in this run. The kernels count too: on some CPUs one thread's vector add or
    # matrix-vector product streams faster than a sum or a copy does, and a roof from the
    # probes alone would then sit below measured points.
    bandwidth = {"read": 4 * n / min(times["read"]), "copy": 8 * n / min(times["copy"])}
    bandwidth.update({kern.name: kern.bytes / min(times[kern.name]) for kern in kernels[:2]})
    flops = {"matmul": 2 * k ** 3 / min(times["matmul"]),
             kernels[2].name: kernels[2].flops / min(times[kernels[2].name])}
    best = {name: value / GB for name, value in {**bandwidth, **flops}.items()}
    roof = Roof(max(best[b] for b in bandwidth), max(best[f] for f in flops), best)
    return roof, kernels


# --- storage

@dataclass
class StorageReads:
    """Sequential read bandwidth and the median time of one random block read of a file."""

    n_bytes: int
    block: int
    sequential: Band        # seconds to read the whole file front to back
    random: Band            # seconds per random block read, one at a time
    cache_dropped: bool     # False: reads may have come from the OS page cache (RAM)

    @property
    def sequential_s(self) -> float:
        """Median seconds to read the whole file."""
        return self.sequential.value

    @property
    def random_s(self) -> float:
        """Median seconds per random block read."""
        return self.random.value

    @property
    def sequential_gbps(self) -> float:
        """Sequential reads in GB/s (of the median read)."""
        return self.n_bytes / self.sequential_s / GB

    @property
    def random_iops(self) -> float:
        """Random block reads per second (one at a time)."""
        return 1 / self.random_s


def _drop_cache(fd: int) -> bool:
    """Ask the OS to forget the file's cached pages, so the next reads go to the device."""
    if hasattr(os, "posix_fadvise"):
        os.fsync(fd)  # dirty pages cannot be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    if sys.platform == "darwin":
        import fcntl
        fcntl.fcntl(fd, getattr(fcntl, "F_NOCACHE", 48), 1)  # bypass the cache from now on
        return True
    return False


def _pread(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, size)


def storage_reads(n_bytes: int | None = None, block: int = 4 * KiB, n_random: int | None = None,
                  directory: str | None = None, repeats: int = 3, *,
                  clock: Clock = time.perf_counter) -> StorageReads:
    """Write a temporary file, then time sequential and random reads; the file is always removed."""
    n_bytes = whole_number(n_bytes if n_bytes is not None else
                           by_profile(32 * MiB, 256 * MiB, 1 * GiB), "n_bytes")
    block = whole_number(block, "block")
    n_random = whole_number(n_random if n_random is not None else
                            by_profile(200, 1000, 4000), "n_random")
    repeats = whole_number(repeats, "repeats")
    if n_bytes < block:
        raise ValueError(f"n_bytes ({n_bytes}) must hold at least one block ({block} bytes)")
    # Bounded by the disk too: never take more than a quarter of its free space.
    free = shutil.disk_usage(directory or tempfile.gettempdir()).free
    n_bytes = fit_to_memory(n_bytes, 1, "cpu", 0.25, minimum=block, budget=free)
    chunk = 1 * MiB
    pattern = os.urandom(min(chunk, n_bytes))
    with tempfile.TemporaryDirectory(dir=directory, prefix="d2l-storage-") as tmp:
        path = os.path.join(tmp, "reads.bin")
        with open(path, "wb") as f:
            for start in range(0, n_bytes, chunk):
                f.write(pattern[: min(chunk, n_bytes - start)])
        flags = os.O_RDONLY | getattr(os, "O_BINARY", 0)
        fd = os.open(path, flags)
        try:
            buf, dropped = bytearray(chunk), []
            rng, blocks = random.Random(0), n_bytes // block

            def drop() -> None:  # before every timed read of the whole file
                dropped.append(_drop_cache(fd))

            def read_all() -> None:
                os.lseek(fd, 0, os.SEEK_SET)
                with open(fd, "rb", buffering=0, closefd=False) as f:
                    while f.readinto(buf):
                        pass

            seq = measure_interleaved({"sequential": read_all}, devices=[], runs=repeats,
                                      before=drop, clock=clock)["sequential"]
            drop()
            rnd = measure_interleaved(
                {"random": lambda: _pread(fd, block, rng.randrange(blocks) * block)},
                devices=[], runs=n_random, clock=clock)["random"]
        finally:
            os.close(fd)
    return StorageReads(n_bytes, block, seq.band, rnd.band, all(dropped))


# --- the network stack, through the loopback interface

@dataclass
class Loopback:
    """Round trip of a 1-byte message and bulk bandwidth over TCP on 127.0.0.1."""

    round_trip: Band        # seconds for one message there and back
    n_bytes: int
    bulk: Band              # seconds to send n_bytes (and get a 1-byte receipt)

    @property
    def round_trip_s(self) -> float:
        """Median seconds of one round trip."""
        return self.round_trip.value

    @property
    def bulk_s(self) -> float:
        """Median seconds of one bulk transfer."""
        return self.bulk.value

    @property
    def gbps(self) -> float:
        """Bulk transfer rate in GB/s (of the median transfer)."""
        return self.n_bytes / self.bulk_s / GB


def _recv_exactly(conn: socket.socket, n: int, buf: bytearray) -> None:
    view, got = memoryview(buf), 0
    while got < n:
        k = conn.recv_into(view[: min(len(buf), n - got)])
        if not k:
            raise ConnectionError("the loopback peer closed the connection early")
        got += k


def loopback_network(n_bytes: int | None = None, pings: int | None = None, repeats: int = 3,
                     timeout: float = 10.0, *, clock: Clock = time.perf_counter) -> Loopback:
    """TCP on 127.0.0.1 (an echo thread plays the peer): 1-byte round trips, bulk send of n_bytes."""
    n_bytes = whole_number(n_bytes if n_bytes is not None else
                           by_profile(64 * MiB, 256 * MiB, 1 * GiB), "n_bytes")
    pings = whole_number(pings if pings is not None else by_profile(200, 1000, 5000), "pings")
    repeats = whole_number(repeats, "repeats")
    chunk = bytes(min(MiB, n_bytes))
    server = socket.create_server(("127.0.0.1", 0))  # loopback only, any free port
    server.settimeout(timeout)                        # every wait ends, even if a side dies
    failure: list[BaseException] = []

    def echo():  # the "other machine": echoes pings, acknowledges bulk transfers
        try:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(timeout)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buf = bytearray(MiB)
                for _ in range(pings * repeats + 1):
                    _recv_exactly(conn, 1, buf)
                    conn.sendall(b"x")
                for _ in range(repeats + 1):
                    _recv_exactly(conn, n_bytes, buf)
                    conn.sendall(b"k")
        except BaseException as err:  # reported by the main thread below
            failure.append(err)

    worker = threading.Thread(target=echo, daemon=True)
    worker.start()
    try:
        with socket.create_connection(server.getsockname(), timeout=timeout) as client:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            one = bytearray(1)

            def ping() -> None:  # one byte there, one back
                client.sendall(b"p")
                _recv_exactly(client, 1, one)

            def bulk() -> None:
                for sent in range(0, n_bytes, len(chunk)):
                    client.sendall(chunk[: min(len(chunk), n_bytes - sent)])
                _recv_exactly(client, 1, one)  # the receipt: every byte has arrived

            # Fixed counts: the echo thread answers exactly this many. The first call of each
            # is timed apart (the first transfer grows the socket buffers).
            rtt = measure_interleaved({"ping": ping}, devices=[], runs=pings * repeats,
                                      clock=clock)["ping"]
            sent = measure_interleaved({"bulk": bulk}, devices=[], runs=repeats,
                                       clock=clock)["bulk"]
    finally:
        worker.join(timeout)
        server.close()
    if failure:
        raise ConnectionError(f"the loopback echo thread failed: {failure[0]!r}")
    return Loopback(rtt.band, n_bytes, sent.band)


# --- accelerators and the links between them

def _need_accelerator(device: torch.device, what: str) -> None:
    if device.type == "cpu":
        raise ValueError(f"{what} needs an accelerator (a 'cuda' or 'mps' device), got cpu")


def host_device_bandwidth(device: torch.device | str | None = None, n_bytes: int | None = None,
                          pinned: bool = False, *,
                          clock: Clock = time.perf_counter) -> dict[str, Rate]:
    """Host-to-device and device-to-host copy rates (GB/s), from pageable or pinned host memory."""
    device = _as_device(device)
    _need_accelerator(device, "host_device_bandwidth")
    if pinned and device.type != "cuda":
        raise ValueError("pinned (page-locked) host memory is a CUDA feature; use pinned=False")
    n_bytes = whole_number(n_bytes if n_bytes is not None else
                           by_profile(32 * MiB, 256 * MiB, 1 * GiB), "n_bytes")
    n = fit_to_memory(max(1, n_bytes // 4), 4, device, 0.25)
    n = fit_to_memory(n, 4, "cpu", 0.25)
    host = torch.ones(n, pin_memory=pinned)
    dev = torch.empty(n, device=device)
    kind = "pinned" if pinned else "pageable"
    # non_blocking only matters (and is only safe to time) with pinned memory; we synchronize.
    h2d = measure(lambda: dev.copy_(host, non_blocking=pinned), "h2d", devices=[device],
                  clock=clock)
    d2h = measure(lambda: host.copy_(dev, non_blocking=pinned), "d2h", devices=[device],
                  clock=clock)
    return {"h2d": Rate(f"host->{device} {kind}", host.nbytes, h2d, "B"),
            "d2h": Rate(f"{device}->host {kind}", host.nbytes, d2h, "B")}


def launch_overhead(device: torch.device | str | None = None, n: int | None = None, *,
                    wait_each: bool = False, clock: Clock = time.perf_counter) -> Band:
    """Seconds per tiny operation: n queued back to back (a throughput), or waited for one by one.

    wait_each=False: the CPU queues n launches and the device runs them as they come, so this is
    1 / (launches per second). wait_each=True synchronizes after every operation: launch plus
    the round trip to learn it finished (a latency). On the CPU both are the dispatch cost.
    """
    device = _as_device(device)
    n = whole_number(n if n is not None else by_profile(1000, 5000, 20000), "n")
    x = torch.zeros(1, device=device)
    wait = [device] if wait_each else []

    def many():
        for _ in range(n):
            x.add_(1.0)
            synchronize(wait)

    return measure(many, "launch", devices=[device], clock=clock).band / n


def peer_bandwidth(devices: Sequence[torch.device | str], n_bytes: int | None = None, *,
                   clock: Clock = time.perf_counter) -> list[list[float]]:
    """GB/s matrix of copies from device i (row) to device j (column), for 1 to 8 or more devices.

    The diagonal is a copy inside one device (bytes read plus written, as copy_bandwidth counts).
    """
    devices = [_as_device(d) for d in devices]
    if not devices:
        raise ValueError("peer_bandwidth needs at least one device")
    n_bytes = whole_number(n_bytes if n_bytes is not None else
                           by_profile(16 * MiB, 128 * MiB, 512 * MiB), "n_bytes")
    n = max(1, n_bytes // 4)
    for d in set(devices):  # each device holds its source and one target at a time
        n = fit_to_memory(n, 4 * 2 * devices.count(d), d, 0.25)
    buffers = [torch.ones(n, device=d) for d in devices]
    matrix = []
    for i, src in enumerate(buffers):
        row = []
        for j, dst_dev in enumerate(devices):
            dst = torch.empty(n, device=dst_dev)
            m = measure(lambda: dst.copy_(src), f"{i}->{j}", devices=[devices[i], devices[j]],
                        clock=clock)
            # a local copy reads and writes the same memory: count both, as copy_bandwidth does
            moved = (2 if i == j else 1) * src.nbytes
            row.append(moved / m.median / GB)
            del dst
        matrix.append(row)
    return matrix


def p2p_access(devices: Sequence[torch.device | str],
               can_access: Callable[[int, int], bool] | None = None) -> list[list[bool]]:
    """Whether each CUDA device can read the other's memory directly (NVLink or PCIe P2P).

    `can_access(i, j)` defaults to torch.cuda.can_device_access_peer; pass another to simulate
    a topology (the logic for k devices is then testable without k GPUs).
    """
    devices = [_as_device(d) for d in devices]
    if not devices:
        raise ValueError("p2p_access needs at least one device")
    can_access = can_access or torch.cuda.can_device_access_peer
    return [[i == j or (a.type == b.type == "cuda" and a.index != b.index and
                        bool(can_access(a.index or 0, b.index or 0)))
             for j, b in enumerate(devices)] for i, a in enumerate(devices)]


# --- published peaks of common GPUs: a measured rate above these is a measuring error

@dataclass(frozen=True)
class GpuPeak:
    """A GPU's published peaks: memory GB/s, dense TFLOP/s per dtype, host link GB/s per direction."""

    name: str
    memory_gbps: float
    tflops: dict            # dtype -> dense TFLOP/s (no sparsity); "tfloat32" and "float8" too
    host_link_gbps: float   # PCIe x16 per direction: gen3 15.75, gen4 31.5, gen5 63 GB/s (PCI-SIG)
    l2_mb: float
    source: str

    def matmul_tflops(self, dtype: str | torch.dtype, tf32: bool = False) -> float | None:
        """Published dense peak for a matmul in dtype (float32 uses the TF32 figure if allowed)."""
        # "tfloat32" and "float8" are no dtypes a product is timed in here, but the table has them
        name = dtype if dtype in ("tfloat32", "float8") else _dtype_name(_as_dtype(dtype))
        if name == "float32" and tf32 and "tfloat32" in self.tflops:
            name = "tfloat32"
        return self.tflops.get(name)


_DS = "NVIDIA data sheet: "
# Each pattern must match the whole model name torch.cuda.get_device_name() reports, after an
# optional "NVIDIA ", "Tesla " or "GeForce ": a variant with other clocks or memory (a laptop
# part, an RTX 4090 D, an A10G, a MIG slice) matches no row and is promised nothing. Sparse
# figures are halved to dense ones. GeForce float16 is the FP16-accumulate figure (the chip's
# true ceiling). Not here, for want of one published figure per reported name: GH200 (96 GB at
# 4 TB/s or 144 GB at 4.9 TB/s, names that may not tell them apart), B200 (figures that changed
# between announcements), RTX 50xx, laptop GPUs (clocks set by each laptop maker).
PUBLISHED_PEAKS: list[tuple[str, GpuPeak]] = [
    (r"H100 80GB HBM3|H100 SXM5?( 80GB)?", GpuPeak(
        "H100 SXM5 80GB", 3350, {"float64": 34, "float32": 67, "tfloat32": 494.7,
                                 "bfloat16": 989.4, "float16": 989.4, "float8": 1978.9},
        63, 50, _DS + "https://www.nvidia.com/en-us/data-center/h100/")),
    (r"H100( 80GB)? PCIe", GpuPeak(
        "H100 PCIe 80GB", 2000, {"float64": 26, "float32": 51, "tfloat32": 378,
                                 "bfloat16": 756, "float16": 756, "float8": 1513},
        63, 50, _DS + "https://www.nvidia.com/en-us/data-center/h100/")),
    (r"H100 NVL", GpuPeak(
        "H100 NVL 94GB", 3900, {"float64": 30, "float32": 60, "tfloat32": 417.5,
                                "bfloat16": 835.5, "float16": 835.5, "float8": 1670.5},
        63, 50, _DS + "https://www.nvidia.com/en-us/data-center/h100/")),
    (r"H200( SXM)?( 141GB)?", GpuPeak(
        "H200 SXM 141GB", 4800, {"float64": 34, "float32": 67, "tfloat32": 494.7,
                                 "bfloat16": 989.4, "float16": 989.4, "float8": 1978.9},
        63, 50, _DS + "https://www.nvidia.com/en-us/data-center/h200/")),
    (r"A100-SXM4-80GB", GpuPeak(
        "A100 SXM4 80GB", 2039, {"float64": 9.7, "float32": 19.5, "tfloat32": 156,
                                 "bfloat16": 312, "float16": 312},
        31.5, 40, _DS + "https://www.nvidia.com/en-us/data-center/a100/")),
    (r"A100 80GB PCIe|A100-PCIE-80GB", GpuPeak(
        "A100 PCIe 80GB", 1935, {"float64": 9.7, "float32": 19.5, "tfloat32": 156,
                                 "bfloat16": 312, "float16": 312},
        31.5, 40, _DS + "https://www.nvidia.com/en-us/data-center/a100/")),
    (r"A100-(SXM4|PCIE)-40GB", GpuPeak(
        "A100 40GB", 1555, {"float64": 9.7, "float32": 19.5, "tfloat32": 156,
                            "bfloat16": 312, "float16": 312},
        31.5, 40, _DS + "https://www.nvidia.com/en-us/data-center/a100/")),
    (r"V100S-PCIE-32GB", GpuPeak(
        "V100S PCIe 32GB", 1134, {"float64": 8.2, "float32": 16.4, "float16": 130},
        15.75, 6, _DS + "https://www.nvidia.com/en-us/data-center/v100/")),
    (r"V100-SXM2-(16|32)GB", GpuPeak(
        "V100 SXM2", 900, {"float64": 7.8, "float32": 15.7, "float16": 125},
        15.75, 6, _DS + "https://www.nvidia.com/en-us/data-center/v100/")),
    (r"V100-PCIE-(16|32)GB", GpuPeak(
        "V100 PCIe", 900, {"float64": 7, "float32": 14, "float16": 112},
        15.75, 6, _DS + "https://www.nvidia.com/en-us/data-center/v100/")),
    # Pascal: no Tensor Cores; float16 runs at twice the float32 rate on the CUDA cores.
    (r"P100-PCIE-16GB", GpuPeak(
        "P100 PCIe 16GB", 732, {"float64": 4.7, "float32": 9.3, "float16": 18.7},
        15.75, 4, _DS + "https://www.nvidia.com/en-us/data-center/tesla-p100/")),
    (r"T4", GpuPeak(
        "T4", 320, {"float32": 8.1, "float16": 65},
        15.75, 4, _DS + "https://www.nvidia.com/en-us/data-center/tesla-t4/")),
    (r"L4", GpuPeak(
        "L4", 300, {"float32": 30.3, "tfloat32": 60, "bfloat16": 121, "float16": 121,
                    "float8": 242.5},
        31.5, 48, _DS + "https://www.nvidia.com/en-us/data-center/l4/")),
    (r"L40S", GpuPeak(
        "L40S", 864, {"float32": 91.6, "tfloat32": 183, "bfloat16": 362.05,
                      "float16": 362.05, "float8": 733},
        31.5, 96, _DS + "https://www.nvidia.com/en-us/data-center/l40s/")),
    (r"A10", GpuPeak(
        "A10", 600, {"float32": 31.2, "tfloat32": 62.5, "bfloat16": 125, "float16": 125},
        31.5, 6, _DS + "https://www.nvidia.com/en-us/data-center/products/a10-gpu/")),
    (r"RTX 4090", GpuPeak(
        "GeForce RTX 4090", 1008, {"float32": 82.6, "tfloat32": 82.6, "bfloat16": 165.2,
                                   "float16": 330.3},
        31.5, 72, "NVIDIA Ada Lovelace architecture whitepaper (2022), appendix A")),
    (r"RTX 3090", GpuPeak(
        "GeForce RTX 3090", 936, {"float32": 35.6, "tfloat32": 35.6, "bfloat16": 71,
                                  "float16": 142},
        31.5, 6, "NVIDIA Ampere GA102 architecture whitepaper (2020), appendix A")),
]


def published_peak(device_name: str) -> GpuPeak | None:
    """The published peaks of the GPU named `device_name`, or None for a GPU not in the table."""
    if not isinstance(device_name, str):
        raise ValueError(f"published_peak() needs the GPU's name as a string, e.g. "
                         f"torch.cuda.get_device_name(0); got {device_name!r}")
    name = " ".join(device_name.split())
    for pattern, peak in PUBLISHED_PEAKS:
        if re.fullmatch(rf"(NVIDIA |Tesla )?(GeForce )?({pattern})", name, re.IGNORECASE):
            return peak
    return None
