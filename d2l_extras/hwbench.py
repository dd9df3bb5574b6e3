"""Measure this machine: memory, caches, vector units, matmul, storage, GPU links (bounded).

Every rate comes with its band (timing.measure). Every function takes `clock=`: tests pass a
`TickClock` to check what is counted (bytes, FLOPs, elements) exactly, however busy the machine.
"""
from __future__ import annotations

import math
import os
import pathlib
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
from typing import Callable, Sequence

import torch

from .bands import Band
from .checks import whole_number
from .hardware import default_device, fit_to_memory
from .perfmodel import GB, Kernel, Roof
from .profiles import by_profile
from .sizes import problem_size
from .timing import Clock, Measurement, TickClock, measure, measure_interleaved, synchronize

KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3
Device = torch.device | str | None

DTYPES = {"float64": torch.float64, "float32": torch.float32,
          "bfloat16": torch.bfloat16, "float16": torch.float16}


def _as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    found = DTYPES.get(dtype) if isinstance(dtype, str) else dtype
    if found not in DTYPES.values():
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return found


def _as_device(device: Device) -> torch.device:
    try:
        return default_device() if device is None else torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda:0', 'mps' ...") from err


def _or_profile(value: int | None, what: str, ci: int, class_: int, full: int) -> int:
    return whole_number(by_profile(ci, class_, full) if value is None else value, what)


def _median(band: str, doc: str) -> property:
    return property(lambda self: getattr(self, band).value, doc=doc)


def machine_load(interval: float | None = None) -> float | None:
    """CPU load: runnable processes per core over the last minute, or busy share over `interval`."""
    if interval is None:
        return os.getloadavg()[0] / (os.cpu_count() or 1) if hasattr(os, "getloadavg") else None
    if not (isinstance(interval, (int, float)) and 0 < interval <= 10):
        raise ValueError(f"machine_load(): interval is a number of seconds in (0, 10], "
                         f"got {interval!r}")
    # sampled now: the minute's average would still count a notebook that has ended
    import psutil
    return psutil.cpu_percent(interval=interval) / 100


def one_thread_if_busy(device: Device = "cpu", busy: float = 0.5) -> int:
    """On a CPU whose cores are busy now (other programs), time on one thread; return the count."""
    # An operator split over every core waits for its slowest thread, and a core another program
    # holds makes every operator a straggler; one thread loses its core now and then, but evenly.
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

    seconds = property(lambda self: self.time.median, doc="Median seconds per call.")
    band = property(lambda self: self.amount / self.time.band,
                    doc="Units per second: the median rate and the band the runs spread over.")
    per_second = property(lambda self: self.amount / self.seconds,
                          doc="Rate in units per second (of the median call).")
    giga = property(lambda self: self.per_second / GB, doc="Rate in GB/s or GFLOP/s.")

    def __str__(self) -> str:
        return f"{self.name}: {self.giga:.3g} G{self.unit}/s ±{self.time.spread:.0%}"


def copy_bandwidth(n_bytes: int | None = None, device: Device = "cpu", *,
                   clock: Clock = time.perf_counter) -> Rate:
    """Copy one buffer into another; bytes read plus bytes written per second (STREAM 'copy')."""
    device = _as_device(device)
    # by default beyond most CPUs' last-level cache, so this is RAM (or GPU memory)
    n_bytes = _or_profile(n_bytes, "n_bytes", 64 * MiB, 256 * MiB, 1 * GiB)
    n = fit_to_memory(n_bytes // 4 or 1, 8, device, fraction=0.25)
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

    random_s = _median("random", "Median seconds per element, random indices.")
    contiguous_s = _median("contiguous", "Median seconds per element, consecutive indices.")
    ratio = property(lambda self: self.random / self.contiguous,
                     doc="How many times slower a random read is than a burst read.")


def gather_time(n: int | None = None, source_bytes: int | None = None, device: Device = "cpu",
                *, clock: Clock = time.perf_counter) -> Gather:
    """Gather n float32 values from a large source: random indices vs consecutive ones."""
    device = _as_device(device)
    n = _or_profile(n, "n", 2 ** 20, 2 ** 22, 2 ** 24)
    source_bytes = _or_profile(source_bytes, "source_bytes", 128 * MiB, 512 * MiB, 1 * GiB)
    size = fit_to_memory(source_bytes // 4 or 1, 4, device, 0.25)
    n = fit_to_memory(n, 4 + 8, device, 0.1)
    source, out = torch.rand(size, device=device), torch.empty(n, device=device)
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
        # capped by the profile (some VMs report hundreds of MiB of L3) and a quarter of free RAM
        largest = min(max(4 * llc, 64 * MiB), by_profile(64 * MiB, 512 * MiB, 16 * GiB),
                      fit_to_memory(16 * GiB, 1, "cpu", 0.25))
    largest, step = whole_number(largest, "largest"), by_profile(4, 2, 2)
    sizes, s = [], 4 * KiB
    while s <= largest:
        sizes.append(s)
        s *= step
    return sizes


def cache_sweep(sizes: Sequence[int] | None = None, lookups: int | None = None,
                device: Device = "cpu", *, clock: Clock = time.perf_counter) -> CacheSweep:
    """Time random reads inside working sets of growing size: steps appear at each cache size."""
    device = _as_device(device)
    sizes = [whole_number(s, "working-set size")
             for s in (default_sweep_sizes() if sizes is None else sizes)]
    if not sizes:
        raise ValueError("cache_sweep needs at least one working-set size in bytes")
    lookups = _or_profile(lookups, "lookups", 2 ** 18, 2 ** 20, 2 ** 22)
    largest = fit_to_memory(max(sizes) // 4 or 1, 4, device, 0.25)
    gen = torch.Generator().manual_seed(0)
    out = torch.empty(lookups, device=device)
    seconds, actual = [], []
    for s in sizes:
        n = max(1, min(s // 4, largest))
        actual.append(4 * n)
        source = torch.rand(n, device=device)
        # int32 indices: fewer bytes streaming past the cache we are trying to observe
        idx = torch.randint(0, n, (lookups,), generator=gen, dtype=torch.int32).to(device)
        m = measure(lambda: torch.index_select(source, 0, idx, out=out), f"{s}",
                    devices=[device], clock=clock)
        seconds.append(m.median / lookups)
        del source, idx  # freed before the next working set is allocated
    return CacheSweep(actual, seconds, str(device))


def _parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B")
    return int(text.rstrip("KMG")) * {"K": KiB, "M": MiB, "G": GiB}.get(text[-1:], 1)


def cache_sizes() -> dict[str, int] | None:
    """The data-cache sizes in bytes the OS reports for one core (L1d, L2, L3), or None."""
    found: dict[str, int] = {}
    if sys.platform.startswith("linux"):
        try:
            for entry in sorted(pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
                kind, level = ((entry / f).read_text("ascii").strip() for f in ("type", "level"))
                if kind in ("Data", "Unified"):
                    size = _parse_size((entry / "size").read_text("ascii"))
                    found["L1d" if level == "1" else f"L{level}"] = size
        except (OSError, ValueError):
            return None
    elif sys.platform == "darwin":
        for key, name in (("l1dcachesize", "L1d"), ("l2cachesize", "L2"), ("l3cachesize", "L3")):
            for prefix in ("hw.perflevel0.", "hw."):  # Apple silicon reports per core cluster
                try:
                    out = subprocess.run(["sysctl", "-n", prefix + key], capture_output=True,
                                         text=True, timeout=5).stdout.strip()
                except (OSError, subprocess.SubprocessError):
                    continue
                if out.isdigit():  # a key this Mac lacks prints nothing
                    found[name] = int(out)
                    break
    return found or None


@dataclass
class LoopVsVector:
    """Seconds per element of y = a*x + y: a Python loop against one vectorized operation."""

    n: int
    loop: Band          # seconds per element: median and interquartile range
    vector: Band

    loop_s = _median("loop", "Median seconds per element of the Python loop.")
    vector_s = _median("vector", "Median seconds per element of the vectorized operation.")
    speedup = property(lambda self: self.loop / self.vector,
                       doc="How many times faster the vectorized version is.")


def loop_vs_vectorized(n: int | None = None, *, clock: Clock = time.perf_counter) -> LoopVsVector:
    """Time a*x + y elementwise in a Python loop and as one torch operation on the CPU."""
    n = _or_profile(n, "n", 10 ** 6, 10 ** 6, 10 ** 7)
    x, y = torch.rand(n), torch.rand(n)
    xs, ys, out = x.tolist(), y.tolist(), [0.0] * n

    def loop():
        for i in range(n):
            out[i] = 2.0 * xs[i] + ys[i]

    lm = measure(loop, "loop", devices=[], clock=clock)
    vm = measure(lambda: torch.add(y, x, alpha=2.0), "vector", devices=[], clock=clock)
    return LoopVsVector(n, lm.band / n, vm.band / n)


# The dtypes Tensor Cores multiply and the compute capability that brought each (CUDA C++
# Programming Guide, "Compute Capabilities"); Pascal (6.x) has none. "tfloat32": float32
# rounded to TF32 on the way in.
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


def dtype_supported(dtype: str | torch.dtype, device: Device = None) -> bool:
    """Whether this device multiplies matrices in this dtype natively (emulation does not count)."""
    dtype, device = _as_dtype(dtype), _as_device(device)
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.version.hip:
        # torch.cuda.is_bf16_supported() says True on Turing (a T4), which only emulates
        # bfloat16, and it asks about the current GPU, not this one: ask this one's capability.
        return "bfloat16" in tensor_core_dtypes(torch.cuda.get_device_capability(device))
    if device.type == "mps" and dtype == torch.float64:
        return False  # Apple GPUs have no float64
    try:
        a = torch.ones(4, 4, dtype=dtype, device=device)
        return bool(torch.isfinite((a @ a).float()).all())
    except (RuntimeError, TypeError):
        return False


def _fits(n: int, dtype: torch.dtype, device: torch.device) -> bool:
    # three n x n matrices (a, b and the product) in half of the free memory
    return fit_to_memory(n * n, 3 * dtype.itemsize, device, 0.5) >= n * n


def matmul_rate(n: int, dtype: str | torch.dtype = "float32", device: Device = None, *,
                clock: Clock = time.perf_counter) -> Rate:
    """FLOP/s of an n x n matrix product (2 n^3 operations per call)."""
    n, dtype, device = whole_number(n, "n"), _as_dtype(dtype), _as_device(device)
    name = str(dtype).removeprefix("torch.")
    if not dtype_supported(dtype, device):
        raise ValueError(f"{name} matrix multiply is not supported natively on "
                         f"{device}; dtype_supported() says which dtypes are")
    if not _fits(n, dtype, device):
        raise ValueError(f"{n} x {n} {name} matrices do not fit in half of the "
                         f"free memory of {device}; pick a smaller n")
    a, b = (torch.rand(n, n, device=device).to(dtype) for _ in range(2))
    c = torch.empty(n, n, device=device, dtype=dtype)
    m = measure(lambda: torch.mm(a, b, out=c), f"{n}", devices=[device], clock=clock)
    return Rate(f"matmul {n} {name}", 2 * n ** 3, m, "FLOP", {"n": n, "dtype": name})


def matmul_sweep(sizes: Sequence[int] | None = None,
                 dtypes: Sequence[str | torch.dtype] = ("float64", "float32", "bfloat16"),
                 device: Device = None, *, clock: Clock = time.perf_counter) -> list[Rate]:
    """matmul_rate for every size and every dtype this device runs natively (others are skipped)."""
    device = _as_device(device)
    sizes = default_matmul_sizes(device) if sizes is None else sizes
    if not sizes or not dtypes:
        raise ValueError("matmul_sweep needs at least one size and one dtype")
    rates = []
    for dtype in [dt for dt in dtypes if dtype_supported(dt, device)]:
        for n in sizes:
            if not _fits(n, _as_dtype(dtype), device):
                break  # larger sizes do not fit either
            rates.append(matmul_rate(n, dtype, device, clock=clock))
    return rates


def default_matmul_sizes(device: Device = None) -> list[int]:
    """Matrix sides from 64 up to the profile's largest for this kind of device that fit memory."""
    # the size policy shrinks its side so that four float32 matrices fit half the free memory
    top = problem_size("matmul_sweep", _as_device(device))
    return [s for s in (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384) if s <= top]


def roofline(n: int | None = None, k: int | None = None, device: Device = "cpu", *,
             clock: Clock = time.perf_counter) -> tuple[Roof, list[Kernel]]:
    """Vector add (n), matrix-vector (sqrt n), matrix-matrix (k) in float32, and their roof."""
    device = _as_device(device)
    n = whole_number(n, "n") if n is not None else problem_size("roofline_stream", device)
    # x, y, z and an m x m matrix with m*m <= n: 16 bytes per element of n at most
    n = fit_to_memory(n, 16, device, 0.25)
    m = max(1, math.isqrt(n))
    x, y, z = (torch.rand(n, device=device) for _ in range(3))
    A, v, w = torch.rand(m, m, device=device), torch.rand(m, device=device), \
        torch.empty(m, device=device)
    # The matmul is sized after the vectors exist, so that its share of free memory is real.
    k = whole_number(k, "k") if k is not None else problem_size("roofline_matmul", device)
    if not _fits(k, torch.float32, device):
        raise ValueError(f"three {k} x {k} float32 matrices do not fit in half of the free "
                         f"memory of {device}; pick a smaller k")
    P, Q, R = (torch.rand(k, k, device=device) for _ in range(3))
    s = torch.empty((), device=device)
    # name: (call, FLOPs, bytes, size); read, copy and matmul only probe the roof
    jobs = {"read": (lambda: torch.sum(x, 0, out=s), 0, 4 * n, n),
            "copy": (lambda: y.copy_(x), 0, 2 * 4 * n, n),
            "matmul": (lambda: torch.mm(P, Q, out=R), 2 * k ** 3, 0, k),
            "vector add": (lambda: torch.add(x, y, out=z), n, 3 * 4 * n, n),
            "matrix-vector": (lambda: torch.mv(A, v, out=w), 2 * m * m, 4 * (m * m + 2 * m), m),
            "matrix-matrix": (lambda: torch.mm(P, Q, out=R), 2 * k ** 3, 3 * 4 * k * k, k)}
    # Timed in turns, in runs of equal length: a burst of load from other programs then slows
    # probes and kernels alike, instead of lowering the roof alone.
    timed = measure_interleaved({name: job[0] for name, job in jobs.items()}, devices=[device],
                                balance=True, clock=clock)
    kernels = [Kernel(name, flops, nbytes, timed[name].median, size, timed[name].band)
               for name, (_, flops, nbytes, size) in list(jobs.items())[3:]]
    # The roof: the best repeat of all that streams and of every product in this run, kernels
    # too: on some CPUs a vector add streams faster than a sum or a copy, and would sit above.
    streams, products = ["read", "copy", "vector add", "matrix-vector"], ["matmul", "matrix-matrix"]
    best = {name: jobs[name][1 if name in products else 2] / timed[name].best / GB
            for name in streams + products}
    roof = Roof(max(best[b] for b in streams), max(best[f] for f in products), best)
    return roof, kernels


@dataclass
class StorageReads:
    """Sequential read bandwidth and the median time of one random block read of a file."""

    n_bytes: int
    block: int
    sequential: Band        # seconds to read the whole file front to back
    random: Band            # seconds per random block read, one at a time
    cache_dropped: bool     # False: reads may have come from the OS page cache (RAM)

    sequential_s = _median("sequential", "Median seconds to read the whole file.")
    random_s = _median("random", "Median seconds per random block read.")
    sequential_gbps = property(lambda self: self.n_bytes / self.sequential_s / GB,
                               doc="Sequential reads in GB/s (of the median read).")
    random_iops = property(lambda self: 1 / self.random_s,
                           doc="Random block reads per second (one at a time).")


def _pread(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows has no pread
    return os.read(fd, size)


def storage_reads(n_bytes: int | None = None, block: int = 4 * KiB, n_random: int | None = None,
                  directory: str | None = None, repeats: int = 3, *,
                  clock: Clock = time.perf_counter) -> StorageReads:
    """Write a temporary file, then time sequential and random reads; the file is always removed."""
    n_bytes = _or_profile(n_bytes, "n_bytes", 32 * MiB, 256 * MiB, 1 * GiB)
    block = whole_number(block, "block")
    n_random = _or_profile(n_random, "n_random", 200, 1000, 4000)
    repeats = whole_number(repeats, "repeats")
    if n_bytes < block:
        raise ValueError(f"n_bytes ({n_bytes}) must hold at least one block ({block} bytes)")
    # Bounded by the disk too: never take more than a quarter of its free space.
    free = shutil.disk_usage(directory or tempfile.gettempdir()).free
    n_bytes = fit_to_memory(n_bytes, 1, "cpu", 0.25, minimum=block, budget=free)
    pattern = os.urandom(min(MiB, n_bytes))
    with tempfile.TemporaryDirectory(dir=directory, prefix="d2l-storage-") as tmp:
        path = os.path.join(tmp, "reads.bin")
        with open(path, "wb") as f:
            for start in range(0, n_bytes, MiB):
                f.write(pattern[: n_bytes - start])
        with open(path, "rb", buffering=0) as f:
            fd, buf = f.fileno(), bytearray(MiB)
            rng, blocks = random.Random(0), n_bytes // block

            def read_all() -> None:
                f.seek(0)
                while f.readinto(buf):
                    pass

            def drop() -> None:  # make the OS forget the file's cached pages: read the device
                if hasattr(os, "posix_fadvise"):
                    os.fsync(fd)  # dirty pages cannot be dropped
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                elif sys.platform == "darwin":
                    import fcntl
                    fcntl.fcntl(fd, getattr(fcntl, "F_NOCACHE", 48), 1)  # bypass it from now on

            seq = measure_interleaved({"sequential": read_all}, devices=[], runs=repeats,
                                      before=drop, clock=clock)["sequential"]
            drop()
            rnd = measure_interleaved(
                {"random": lambda: _pread(fd, block, rng.randrange(blocks) * block)},
                devices=[], runs=n_random, clock=clock)["random"]
    dropped = hasattr(os, "posix_fadvise") or sys.platform == "darwin"
    return StorageReads(n_bytes, block, seq.band, rnd.band, dropped)


@dataclass
class Loopback:
    """Round trip of a 1-byte message and bulk bandwidth over TCP on 127.0.0.1."""

    round_trip: Band        # seconds for one message there and back
    n_bytes: int
    bulk: Band              # seconds to send n_bytes (and get a 1-byte receipt)

    round_trip_s = _median("round_trip", "Median seconds of one round trip.")
    bulk_s = _median("bulk", "Median seconds of one bulk transfer.")
    gbps = property(lambda self: self.n_bytes / self.bulk_s / GB,
                    doc="Bulk transfer rate in GB/s (of the median transfer).")


def loopback_network(n_bytes: int | None = None, pings: int | None = None, repeats: int = 3,
                     timeout: float = 10.0, *, clock: Clock = time.perf_counter) -> Loopback:
    """TCP on 127.0.0.1 (a thread plays the peer): 1-byte round trips, bulk send of n_bytes."""
    n_bytes = _or_profile(n_bytes, "n_bytes", 64 * MiB, 256 * MiB, 1 * GiB)
    pings = _or_profile(pings, "pings", 200, 1000, 5000)
    repeats = whole_number(repeats, "repeats")
    chunk = bytes(min(MiB, n_bytes))
    server = socket.create_server(("127.0.0.1", 0))  # loopback only, any free port
    server.settimeout(timeout)                        # every wait ends, even if a side dies
    # Fixed counts, the first call of each timed apart: the peer answers exactly this many.
    messages = [1] * (pings * repeats + 1) + [n_bytes] * (repeats + 1)
    failure: list[BaseException] = []

    def peer():  # the "other machine": answers each message, once all of it came, with 1 byte
        try:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(timeout)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buf = bytearray(MiB)
                for size in messages:
                    while size > 0:  # all of it, in pieces of at most 1 MiB
                        got = conn.recv_into(buf, min(MiB, size))
                        if not got:
                            raise ConnectionError("the client closed the connection early")
                        size -= got
                    conn.sendall(b"k")
        except BaseException as err:  # reported by the main thread below
            failure.append(err)

    worker = threading.Thread(target=peer, daemon=True)
    worker.start()
    try:
        with socket.create_connection(server.getsockname(), timeout=timeout) as client:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            one = bytearray(1)

            def send(size: int) -> None:
                for sent in range(0, size, len(chunk)):
                    client.sendall(chunk[: size - sent])
                client.recv_into(one)  # the answer: every byte has arrived (0: the peer failed)

            # the first transfer grows the socket buffers: measure_interleaved times it apart
            rtt = measure_interleaved({"ping": lambda: send(1)}, devices=[],
                                      runs=pings * repeats, clock=clock)["ping"]
            bulk = measure_interleaved({"bulk": lambda: send(n_bytes)}, devices=[],
                                       runs=repeats, clock=clock)["bulk"]
    finally:
        worker.join(timeout)
        server.close()
    if failure:
        raise ConnectionError(f"the loopback echo thread failed: {failure[0]!r}")
    return Loopback(rtt.band, n_bytes, bulk.band)


def host_device_bandwidth(device: Device = None, n_bytes: int | None = None, pinned: bool = False,
                          *, clock: Clock = time.perf_counter) -> dict[str, Rate]:
    """Host-to-device and device-to-host copy rates (GB/s), from pageable or pinned host memory."""
    device = _as_device(device)
    if device.type == "cpu":
        raise ValueError("host_device_bandwidth needs an accelerator (a 'cuda' or 'mps' device), "
                         "got cpu")
    if pinned and device.type != "cuda":
        raise ValueError("pinned (page-locked) host memory is a CUDA feature; use pinned=False")
    n_bytes = _or_profile(n_bytes, "n_bytes", 32 * MiB, 256 * MiB, 1 * GiB)
    n = fit_to_memory(fit_to_memory(max(1, n_bytes // 4), 4, device, 0.25), 4, "cpu", 0.25)
    host, dev = torch.ones(n, pin_memory=pinned), torch.empty(n, device=device)
    kind = "pinned" if pinned else "pageable"
    rates = {}
    for key, dst, src, name in (("h2d", dev, host, f"host->{device}"),
                                ("d2h", host, dev, f"{device}->host")):
        # non_blocking only matters (and is only safe to time) with pinned memory; we synchronize
        m = measure(lambda: dst.copy_(src, non_blocking=pinned), key, devices=[device],
                    clock=clock)
        rates[key] = Rate(f"{name} {kind}", host.nbytes, m, "B")
    return rates


def launch_overhead(device: Device = None, n: int | None = None, *,
                    wait_each: bool = False, clock: Clock = time.perf_counter) -> Band:
    """Seconds per tiny operation: n queued back to back (throughput) or waited for one by one."""
    # Queued, the device runs launches as they come: 1 / (launches per second). wait_each adds
    # the round trip to learn each finished (a latency). On the CPU both are the dispatch cost.
    device = _as_device(device)
    n = _or_profile(n, "n", 1000, 5000, 20000)
    x = torch.zeros(1, device=device)
    wait = [device] if wait_each else []

    def many():
        for _ in range(n):
            x.add_(1.0)
            synchronize(wait)

    return measure(many, "launch", devices=[device], clock=clock).band / n


def peer_bandwidth(devices: Sequence[Device], n_bytes: int | None = None, *,
                   clock: Clock = time.perf_counter) -> list[list[float]]:
    """GB/s matrix of copies from device i (row) to device j (column), for 1 to 8 or more GPUs."""
    devices = [_as_device(d) for d in devices]
    if not devices:
        raise ValueError("peer_bandwidth needs at least one device")
    n = max(1, _or_profile(n_bytes, "n_bytes", 16 * MiB, 128 * MiB, 512 * MiB) // 4)
    for d in set(devices):  # each device holds its source and one target at a time
        n = fit_to_memory(n, 4 * 2 * devices.count(d), d, 0.25)
    buffers = [torch.ones(n, device=d) for d in devices]
    matrix = [[0.0] * len(devices) for _ in devices]
    for i, src in enumerate(buffers):
        for j, dst_dev in enumerate(devices):
            dst = torch.empty(n, device=dst_dev)
            m = measure(lambda: dst.copy_(src), f"{i}->{j}", devices=[devices[i], dst_dev],
                        clock=clock)
            # a local copy reads and writes the same memory: count both, as copy_bandwidth does
            matrix[i][j] = (2 if i == j else 1) * src.nbytes / m.median / GB
            del dst
    return matrix


def p2p_access(devices: Sequence[Device],
               can_access: Callable[[int, int], bool] | None = None) -> list[list[bool]]:
    """Whether each CUDA device can read the other's memory directly (NVLink or PCIe P2P)."""
    # can_access defaults to torch.cuda.can_device_access_peer; tests pass a simulated topology.
    devices = [_as_device(d) for d in devices]
    if not devices:
        raise ValueError("p2p_access needs at least one device")
    can_access = can_access or torch.cuda.can_device_access_peer
    return [[i == j or (a.type == b.type == "cuda" and a.index != b.index and
                        bool(can_access(a.index or 0, b.index or 0)))
             for j, b in enumerate(devices)] for i, a in enumerate(devices)]


@dataclass(frozen=True)
class GpuPeak:
    """A GPU's published peaks: memory GB/s, dense TFLOP/s by dtype, host link GB/s each way."""

    name: str
    memory_gbps: float
    tflops: dict            # dtype -> dense TFLOP/s (no sparsity); "tfloat32" and "float8" too
    host_link_gbps: float   # PCIe x16 per direction: gen3 15.75, gen4 31.5, gen5 63 GB/s (PCI-SIG)
    l2_mb: float
    source: str

    def matmul_tflops(self, dtype: str | torch.dtype, tf32: bool = False) -> float | None:
        """Published dense peak for a matmul in dtype (float32 uses the TF32 figure if allowed)."""
        # "tfloat32" and "float8" are no dtypes a product is timed in here, but the table has them
        name = dtype if dtype in ("tfloat32", "float8") else str(_as_dtype(dtype))[len("torch."):]
        if name == "float32" and tf32 and "tfloat32" in self.tflops:
            name = "tfloat32"
        return self.tflops.get(name)


_DS = "NVIDIA data sheet: https://www.nvidia.com/en-us/data-center/"
_PEAK_DTYPES = ("float64", "float32", "tfloat32", "bfloat16", "float16", "float8")
# A pattern matches the whole name torch.cuda.get_device_name() reports: a variant with other
# clocks or memory (laptop part, RTX 4090 D, A10G, MIG slice) is promised nothing. Sparse figures
# are halved; GeForce float16 is the FP16-accumulate figure. Left out, for want of one figure per
# name: GH200, B200, RTX 50xx, laptop GPUs. Columns: pattern, name, memory GB/s, host link GB/s,
# L2 MB, source, dense TFLOP/s in each of _PEAK_DTYPES (None: not published).
_PEAKS = [
    (r"H100 80GB HBM3|H100 SXM5?( 80GB)?", "H100 SXM5 80GB", 3350, 63, 50, _DS + "h100/",
     (34, 67, 494.7, 989.4, 989.4, 1978.9)),
    (r"H100( 80GB)? PCIe", "H100 PCIe 80GB", 2000, 63, 50, _DS + "h100/",
     (26, 51, 378, 756, 756, 1513)),
    (r"H100 NVL", "H100 NVL 94GB", 3900, 63, 50, _DS + "h100/",
     (30, 60, 417.5, 835.5, 835.5, 1670.5)),
    (r"H200( SXM)?( 141GB)?", "H200 SXM 141GB", 4800, 63, 50, _DS + "h200/",
     (34, 67, 494.7, 989.4, 989.4, 1978.9)),
    (r"A100-SXM4-80GB", "A100 SXM4 80GB", 2039, 31.5, 40, _DS + "a100/",
     (9.7, 19.5, 156, 312, 312, None)),
    (r"A100 80GB PCIe|A100-PCIE-80GB", "A100 PCIe 80GB", 1935, 31.5, 40, _DS + "a100/",
     (9.7, 19.5, 156, 312, 312, None)),
    (r"A100-(SXM4|PCIE)-40GB", "A100 40GB", 1555, 31.5, 40, _DS + "a100/",
     (9.7, 19.5, 156, 312, 312, None)),
    (r"V100S-PCIE-32GB", "V100S PCIe 32GB", 1134, 15.75, 6, _DS + "v100/",
     (8.2, 16.4, None, None, 130, None)),
    (r"V100-SXM2-(16|32)GB", "V100 SXM2", 900, 15.75, 6, _DS + "v100/",
     (7.8, 15.7, None, None, 125, None)),
    (r"V100-PCIE-(16|32)GB", "V100 PCIe", 900, 15.75, 6, _DS + "v100/",
     (7, 14, None, None, 112, None)),
    # Pascal: no Tensor Cores; float16 runs at twice the float32 rate on the CUDA cores.
    (r"P100-PCIE-16GB", "P100 PCIe 16GB", 732, 15.75, 4, _DS + "tesla-p100/",
     (4.7, 9.3, None, None, 18.7, None)),
    (r"T4", "T4", 320, 15.75, 4, _DS + "tesla-t4/", (None, 8.1, None, None, 65, None)),
    (r"L4", "L4", 300, 31.5, 48, _DS + "l4/", (None, 30.3, 60, 121, 121, 242.5)),
    (r"L40S", "L40S", 864, 31.5, 96, _DS + "l40s/", (None, 91.6, 183, 362.05, 362.05, 733)),
    (r"A10", "A10", 600, 31.5, 6, _DS + "products/a10-gpu/", (None, 31.2, 62.5, 125, 125, None)),
    (r"RTX 4090", "GeForce RTX 4090", 1008, 31.5, 72,
     "NVIDIA Ada Lovelace architecture whitepaper (2022), appendix A",
     (None, 82.6, 82.6, 165.2, 330.3, None)),
    (r"RTX 3090", "GeForce RTX 3090", 936, 31.5, 6,
     "NVIDIA Ampere GA102 architecture whitepaper (2020), appendix A",
     (None, 35.6, 35.6, 71, 142, None)),
]
PUBLISHED_PEAKS: list[tuple[str, GpuPeak]] = [
    (pattern, GpuPeak(name, memory, {d: t for d, t in zip(_PEAK_DTYPES, tflops) if t is not None},
                      link, l2, source))
    for pattern, name, memory, link, l2, source, tflops in _PEAKS]


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
