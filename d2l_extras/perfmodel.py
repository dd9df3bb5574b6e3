"""Models of compute: a call takes max(overhead, bytes / bandwidth, flops / peak); the roofline."""
from dataclasses import dataclass, field
from typing import Sequence

from .bands import Band
from .checks import non_negative_number, positive_number, whole_number

GB = 1e9  # rates are decimal (GB/s, GFLOP/s) as vendors print them; sizes are binary (KiB, MiB)
# The three terms of the model, and the name of the regime where each one is the largest.
REGIMES = {"overhead": "overhead-bound", "memory": "memory-bound", "compute": "compute-bound"}


@dataclass(frozen=True)
class PerformanceModel:
    """A machine in three numbers: seconds per call, bytes per second, FLOP per second."""

    overhead_s: float   # fixed seconds per call (Python, the dispatcher, a kernel launch)
    bandwidth: float    # bytes per second between memory and the processor
    peak: float         # floating point operations per second

    def __post_init__(self) -> None:
        for name in ("overhead_s", "bandwidth", "peak"):
            positive_number(getattr(self, name), f"PerformanceModel: {name}")

    def terms(self, flops: float, n_bytes: float) -> dict[str, float]:
        """Seconds of one call under each limit alone: 'overhead', 'memory' and 'compute'."""
        # Work may be zero (a call that moves nothing still pays its overhead), never negative.
        flops = non_negative_number(flops, "PerformanceModel: flops")
        n_bytes = non_negative_number(n_bytes, "PerformanceModel: n_bytes")
        return {"overhead": self.overhead_s, "memory": n_bytes / self.bandwidth,
                "compute": flops / self.peak}

    def time(self, flops: float, n_bytes: float) -> float:
        """Predicted seconds of one call: the largest of the three terms."""
        return max(self.terms(flops, n_bytes).values())

    def regime(self, flops: float, n_bytes: float) -> str:
        """'overhead-bound', 'memory-bound' or 'compute-bound': the largest term's regime."""
        terms = self.terms(flops, n_bytes)
        return REGIMES[max(terms, key=terms.get)]


@dataclass
class Kernel:
    """One operation: FLOPs, the fewest bytes it must move, and the measured median seconds."""

    name: str
    flops: float
    bytes: float
    seconds: float
    size: int = 0      # the n, m or k the counts were made for
    time: Band | None = None   # seconds per call: median and interquartile range, if measured

    intensity = property(lambda self: self.flops / self.bytes, doc="FLOPs per byte moved.")
    gflops = property(lambda self: self.flops / self.seconds / GB, doc="Measured GFLOP/s.")
    gbps = property(lambda self: self.bytes / self.seconds / GB, doc="Counted bytes moved, GB/s.")
    gflops_band = property(lambda self: self.flops / GB / (self.time or Band.exact(self.seconds)),
                           doc="GFLOP/s with the band of the measured runs (zero width if none).")


def attainable(intensity: float, bandwidth_gbps: float, peak_gflops: float) -> float:
    """Roofline bound in GFLOP/s: min(peak, bandwidth x intensity)."""
    if intensity <= 0 or bandwidth_gbps <= 0 or peak_gflops <= 0:
        raise ValueError("attainable() needs intensity, bandwidth and peak > 0")
    return min(peak_gflops, bandwidth_gbps * intensity)


@dataclass
class Roof:
    """The best bandwidth and arithmetic rate measured in this run, and what each probe gave."""

    bandwidth_gbps: float
    peak_gflops: float
    probes: dict = field(default_factory=dict)   # name -> best GB/s or GFLOP/s measured
    published: object = None   # a GPU's data sheet (hwbench.GpuPeak) where roofline knows it

    ridge = property(lambda self: self.peak_gflops / self.bandwidth_gbps,
                     doc="FLOP per byte where the arithmetic, not the memory, becomes the limit.")

    def attainable(self, intensity: float) -> float:
        """Roofline bound in GFLOP/s at this arithmetic intensity."""
        return attainable(intensity, self.bandwidth_gbps, self.peak_gflops)


def roof_violations(kernels: Sequence[Kernel], roof: Roof, tolerance: float = 0.1,
                    cache_bytes: float = 0) -> list[str]:
    """Kernels measured above the roof by more than `tolerance` (a fraction), described."""
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance is a fraction in [0, 1), got {tolerance}")
    if not cache_bytes >= 0:
        raise ValueError(f"cache_bytes is a size in bytes >= 0 (0: no cache), got {cache_bytes}")

    def bound(k: Kernel) -> float:
        # A cache may keep `cache_bytes` of a kernel's data between calls: only the rest crosses
        # the memory bus, and a kernel that fits the cache meets the flat roof alone.
        if k.bytes <= cache_bytes:
            return roof.peak_gflops
        bandwidth = roof.bandwidth_gbps * k.bytes / (k.bytes - cache_bytes)
        return attainable(k.intensity, bandwidth, roof.peak_gflops)

    return [f"{k.name}: {k.gflops:.3g} GFLOP/s > roof {bound(k):.3g}"
            for k in kernels if k.gflops > (1 + tolerance) * bound(k)]


def memory_regime(operand_bytes: int, cache_bytes: int | None, live: int = 3) -> str:
    """Where an elementwise chain's passes go: 'memory', 'cache', 'mixed' or 'unknown'."""
    operand_bytes = whole_number(operand_bytes, "memory_regime(): operand_bytes")
    live = whole_number(live, "memory_regime(): live")
    if cache_bytes is None:
        return "unknown"
    cache_bytes = whole_number(cache_bytes, "memory_regime(): cache_bytes (None when unknown)")
    if operand_bytes > cache_bytes:
        return "memory"   # not even one operand fits: every pass streams from main memory
    # One eager operator reads one or two operands and writes a third: `live` must fit.
    return "cache" if live * operand_bytes <= cache_bytes else "mixed"
