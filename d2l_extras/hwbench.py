"""Measure this machine: caches, matmul, roofline, disk, network, GPU links; tests pass clock=."""
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
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from .bands import Band
from .checks import whole_number
from .hardware import default_device, fit_to_memory
from .parallel import allow_tf32
from .perfmodel import GB, Kernel, Roof, roof_violations
from .profiles import by_profile
from .sizes import problem_size
from .timing import Clock, Measurement, measure, measure_interleaved, synchronize

KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3
Device = torch.device | str | None


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")  # torch.float32: float32


DTYPES = {_dtype_name(t): t for t in (torch.float64, torch.float32, torch.bfloat16, torch.float16)}


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


def machine_load(interval: float | None = None) -> float | None:
    """CPU load: runnable processes per core over the last minute, or busy share over `interval`."""
    if interval is None:
        return os.getloadavg()[0] / (os.cpu_count() or 1) if hasattr(os, "getloadavg") else None
    if not (isinstance(interval, (int, float)) and 0 < interval <= 10):
        raise ValueError(f"machine_load(): interval is seconds in (0, 10], got {interval!r}")
    # sampled now: the minute's average would still count a notebook that has ended
    import psutil
    return psutil.cpu_percent(interval=interval) / 100


def one_thread_if_busy(device: Device = "cpu", busy: float = 0.5) -> int:
    """On a CPU whose cores are busy now (other programs), time on one thread; return the count."""
    # A core another program holds makes every operator split over all cores wait for it.
    if _as_device(device).type == "cpu" and machine_load(0.25) >= busy:
        torch.set_num_threads(1)
    return torch.get_num_threads()


@dataclass
class Rate:
    """Work done per call (bytes moved or floating point operations) and the measured calls."""

    amount: float      # bytes or FLOPs per call
    time: Measurement  # seconds per call: median and spread

    giga = property(lambda self: self.amount / self.time.median / GB)  # GB/s or GFLOP/s


def default_sweep_sizes(largest: int | None = None) -> list[int]:
    """Working sets from 4 KiB to beyond the last-level cache, capped by the profile."""
    if largest is None:
        llc = max((cache_sizes() or {}).values(), default=32 * MiB)
        # capped by the profile (some VMs report hundreds of MiB of L3) and a quarter of free RAM
        largest = min(max(4 * llc, 64 * MiB), by_profile(64 * MiB, 512 * MiB, 16 * GiB),
                      fit_to_memory(16 * GiB, 1, "cpu", 0.25))
    largest, step = whole_number(largest, "largest"), by_profile(4, 2, 2)
    return [s for s in (4 * KiB * step ** i for i in range(64)) if s <= largest]


def _parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B")
    return int(text.rstrip("KMG")) * {"K": KiB, "M": MiB, "G": GiB}.get(text[-1:], 1)


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
        # is_bf16_supported() says True on a T4, which only emulates it: ask this GPU's capability
        return "bfloat16" in tensor_core_dtypes(torch.cuda.get_device_capability(device))
    try:  # an Apple GPU refuses float64 tensors (TypeError)
        a = torch.ones(4, 4, dtype=dtype, device=device)
        return bool(torch.isfinite((a @ a).float()).all())
    except (RuntimeError, TypeError):
        return False


def _check_fits(n: int, dtype: torch.dtype, device: torch.device, what: str) -> None:
    if fit_to_memory(n * n, 3 * dtype.itemsize, device, 0.5) < n * n:
        raise ValueError(f"three {n} x {n} {_dtype_name(dtype)} matrices do not fit in half of the "
                         f"free memory of {device}; pick a smaller {what}")


def matmul_rate(n: int, dtype: str | torch.dtype = "float32", device: Device = None, *,
                clock: Clock = time.perf_counter) -> Rate:
    """FLOP/s of an n x n matrix product (2 n^3 operations per call)."""
    n, dtype, device = whole_number(n, "n"), _as_dtype(dtype), _as_device(device)
    if not dtype_supported(dtype, device):
        raise ValueError(f"{_dtype_name(dtype)} matrix multiply is not supported natively on "
                         f"{device}; dtype_supported() says which dtypes are")
    _check_fits(n, dtype, device, "n")
    a, b, c = (torch.rand(n, n, device=device).to(dtype) for _ in range(3))
    m = measure(lambda: torch.mm(a, b, out=c), f"{n}", devices=[device], clock=clock)
    return Rate(2 * n ** 3, m)


def default_matmul_sizes(device: Device = None) -> list[int]:
    """Matrix sides from 64 up to the profile's largest for this kind of device that fit memory."""
    top = problem_size("matmul_sweep", _as_device(device))
    return [s for s in (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384) if s <= top]


def roofline(n: int | None = None, k: int | None = None, device: Device = "cpu", *,
             clock: Clock = time.perf_counter) -> tuple[Roof, list[Kernel]]:
    """Vector add (n), matrix-vector (sqrt n), matrix-matrix (k) in float32, and their roof."""
    device = _as_device(device)
    # x, y, z and an m x m matrix with m * m <= n: at most 16 bytes per element of n
    n = fit_to_memory(whole_number(n, "n") if n is not None else
                      problem_size("roofline_stream", device), 16, device, 0.25)
    m = math.isqrt(n)
    x, y, z, A, v, w = (torch.rand(size, device=device) for size in (n, n, n, (m, m), m, m))
    # The matmul is sized after the vectors exist, so that its share of free memory is real.
    k = whole_number(k, "k") if k is not None else problem_size("roofline_matmul", device)
    _check_fits(k, torch.float32, device, "k")
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


@dataclass
class StorageReads:
    """Sequential read bandwidth and the median time of one random block read of a file."""

    n_bytes: int
    block: int
    sequential: Band        # seconds to read the whole file front to back
    random: Band            # seconds per random block read, one at a time
    cache_dropped: bool     # False: reads may have come from the OS page cache (RAM)

    sequential_s = property(lambda self: self.sequential.value)
    random_s = property(lambda self: self.random.value)
    sequential_gbps = property(lambda self: self.n_bytes / self.sequential_s / GB)
    random_iops = property(lambda self: 1 / self.random_s)


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
    n_random = _or_profile(n_random, "n_random", 200, 1000, 4000)
    block, repeats = whole_number(block, "block"), whole_number(repeats, "repeats")
    if n_bytes < block:
        raise ValueError(f"n_bytes ({n_bytes}) must hold at least one block ({block} bytes)")
    free = shutil.disk_usage(directory or tempfile.gettempdir()).free
    n_bytes = fit_to_memory(n_bytes, 1, "cpu", 0.25, minimum=block, budget=free)
    pattern, buf, rng = os.urandom(min(MiB, n_bytes)), bytearray(MiB), random.Random(0)
    # unbuffered, and gone when closed, even after an error (a file without a name where the OS can)
    with tempfile.TemporaryFile(dir=directory, prefix="d2l-storage-", buffering=0) as f:
        for start in range(0, n_bytes, MiB):
            f.write(pattern[: n_bytes - start])
        fd = f.fileno()

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
            {"random": lambda: _pread(fd, block, rng.randrange(n_bytes // block) * block)},
            devices=[], runs=n_random, clock=clock)["random"]
    dropped = hasattr(os, "posix_fadvise") or sys.platform == "darwin"
    return StorageReads(n_bytes, block, seq.band, rnd.band, dropped)


@dataclass
class Loopback:
    """Round trip of a 1-byte message and bulk bandwidth over TCP on 127.0.0.1."""

    round_trip: Band        # seconds for one message there and back
    n_bytes: int
    bulk: Band              # seconds to send n_bytes (and get a 1-byte receipt)

    round_trip_s = property(lambda self: self.round_trip.value)
    gbps = property(lambda self: self.n_bytes / self.bulk.value / GB)


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

            def send(size: int) -> None:
                for sent in range(0, size, len(chunk)):
                    client.sendall(chunk[: size - sent])
                client.recv(1)  # the answer: every byte has arrived (none: the peer failed)

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
        raise ValueError("host_device_bandwidth needs an accelerator ('cuda' or 'mps'), got cpu")
    if pinned and device.type != "cuda":
        raise ValueError("pinned (page-locked) host memory is a CUDA feature; use pinned=False")
    n_bytes = _or_profile(n_bytes, "n_bytes", 32 * MiB, 256 * MiB, 1 * GiB)
    n = fit_to_memory(fit_to_memory(max(1, n_bytes // 4), 4, device, 0.25), 4, "cpu", 0.25)
    host, dev = torch.ones(n, pin_memory=pinned), torch.empty(n, device=device)
    # non_blocking only matters (and is only safe to time) with pinned memory; we synchronize
    return {key: Rate(host.nbytes, measure(lambda: dst.copy_(src, non_blocking=pinned), key,
                                           devices=[device], clock=clock))
            for key, dst, src in (("h2d", dev, host), ("d2h", host, dev))}


def launch_overhead(device: Device = None, n: int | None = None, *,
                    wait_each: bool = False, clock: Clock = time.perf_counter) -> Band:
    """Seconds per tiny operation: n queued back to back (throughput) or waited for one by one."""
    # Queued, the pace of the slower side: the CPU queuing launches (Python, dispatch, driver) or
    # the device running them; on the reference H100 the CPU's, the GPU waited (notebook 04 reads
    # the GPU's own time per kernel from the profiler). wait_each adds the round trip to learn
    # each finished (a latency). On the CPU both are the dispatch cost.
    device, n = _as_device(device), _or_profile(n, "n", 1000, 5000, 20000)
    x, wait = torch.zeros(1, device=device), [device] if wait_each else []

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

    def rate(i: int, j: int) -> float:  # its target is freed before the next one is allocated
        dst = torch.empty(n, device=devices[j])
        m = measure(lambda: dst.copy_(buffers[i]), f"{i}->{j}", devices=[devices[i], devices[j]],
                    clock=clock)
        # a local copy reads and writes the same memory: count both (notebook 04: copy_rate)
        return (2 if i == j else 1) * dst.nbytes / m.median / GB

    return [[rate(i, j) for j in range(len(devices))] for i in range(len(devices))]


def p2p_access(devices: Sequence[Device],
               can_access: Callable[[int, int], bool] | None = None) -> list[list[bool]]:
    """Whether each CUDA device can read the other's memory directly (NVLink or PCIe P2P)."""
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

    def matmul_tflops(self, dtype: str | torch.dtype) -> float | None:
        """Published dense peak for a matmul in dtype ("tfloat32" and "float8" too), or None."""
        name = dtype if dtype in ("tfloat32", "float8") else _dtype_name(_as_dtype(dtype))
        return self.tflops.get(name)


_PEAK_DTYPES = ("float64", "float32", "tfloat32", "bfloat16", "float16", "float8")
_H100 = (34, 67, 494.7, 989.4, 989.4, 1978.9)  # the H200 has the same compute
_A100 = (9.7, 19.5, 156, 312, 312, None)
# A pattern matches the whole name torch.cuda.get_device_name() reports: variants (laptop part,
# RTX 4090 D, A10G, MIG slice; GH200, B200, RTX 50xx lack one figure per name) get nothing.
# Columns: pattern, name, memory GB/s, host link GB/s, L2 MB, source (".../": a data sheet page),
# dense TFLOP/s per _PEAK_DTYPES (None: unpublished; sparse halved). GeForce float16 and bfloat16:
# the FP32-accumulate figures, as torch.mm accumulates 16-bit products in float32 (the FP16-accumulate
# figures, twice as high, do not apply).
_PEAKS = [
    (r"H100 80GB HBM3|H100 SXM5?( 80GB)?", "H100 SXM5 80GB", 3350, 63, 50, "h100/", _H100),
    (r"H100( 80GB)? PCIe", "H100 PCIe 80GB", 2000, 63, 50, "h100/",
     (26, 51, 378, 756, 756, 1513)),
    (r"H100 NVL", "H100 NVL 94GB", 3900, 63, 50, "h100/", (30, 60, 417.5, 835.5, 835.5, 1670.5)),
    (r"H200( SXM)?( 141GB)?", "H200 SXM 141GB", 4800, 63, 50, "h200/", _H100),
    (r"A100-SXM4-80GB", "A100 SXM4 80GB", 2039, 31.5, 40, "a100/", _A100),
    (r"A100 80GB PCIe|A100-PCIE-80GB", "A100 PCIe 80GB", 1935, 31.5, 40, "a100/", _A100),
    (r"A100-(SXM4|PCIE)-40GB", "A100 40GB", 1555, 31.5, 40, "a100/", _A100),
    (r"V100S-PCIE-32GB", "V100S PCIe 32GB", 1134, 15.75, 6, "v100/",
     (8.2, 16.4, None, None, 130, None)),
    (r"V100-SXM2-(16|32)GB", "V100 SXM2", 900, 15.75, 6, "v100/",
     (7.8, 15.7, None, None, 125, None)),
    (r"V100-PCIE-(16|32)GB", "V100 PCIe", 900, 15.75, 6, "v100/", (7, 14, None, None, 112, None)),
    # Pascal: no Tensor Cores; float16 runs at twice the float32 rate on the CUDA cores.
    (r"P100-PCIE-16GB", "P100 PCIe 16GB", 732, 15.75, 4, "tesla-p100/",
     (4.7, 9.3, None, None, 18.7, None)),
    (r"T4", "T4", 320, 15.75, 4, "tesla-t4/", (None, 8.1, None, None, 65, None)),
    (r"L4", "L4", 300, 31.5, 48, "l4/", (None, 30.3, 60, 121, 121, 242.5)),
    (r"L40S", "L40S", 864, 31.5, 96, "l40s/", (None, 91.6, 183, 362.05, 362.05, 733)),
    (r"A10", "A10", 600, 31.5, 6, "products/a10-gpu/", (None, 31.2, 62.5, 125, 125, None)),
    (r"RTX 4090", "GeForce RTX 4090", 1008, 31.5, 72,
     "NVIDIA Ada Lovelace architecture whitepaper (2022), appendix A",
     (None, 82.6, 82.6, 165.2, 165.2, None)),
    (r"RTX 3090", "GeForce RTX 3090", 936, 31.5, 6,
     "NVIDIA Ampere GA102 architecture whitepaper (2020), appendix A",
     (None, 35.6, 35.6, 71, 71, None)),
]
PUBLISHED_PEAKS: list[tuple[str, GpuPeak]] = [
    (pattern, GpuPeak(name, memory, {d: t for d, t in zip(_PEAK_DTYPES, tflops) if t is not None},
                      link, l2, "NVIDIA data sheet: https://www.nvidia.com/en-us/data-center/"
                      + source if source.endswith("/") else source))
    for pattern, name, memory, link, l2, source, tflops in _PEAKS]


def published_peak(device_name: str) -> GpuPeak | None:
    """The published peaks of the GPU named `device_name`, or None for a GPU not in the table."""
    if not isinstance(device_name, str):
        raise ValueError(f"published_peak() needs the GPU's name as a string, e.g. "
                         f"torch.cuda.get_device_name(0); got {device_name!r}")
    name = " ".join(device_name.split())
    return next((peak for pattern, peak in PUBLISHED_PEAKS
                 if re.fullmatch(rf"(NVIDIA |Tesla )?(GeForce )?({pattern})", name, re.I)), None)
