"""The roofline: kernels (FLOPs, bytes, seconds) under the best bandwidth and peak measured."""
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from .bands import Band

if TYPE_CHECKING:
    from .hwbench import GpuPeak

GB = 1e9  # rates are decimal (GB/s, GFLOP/s) as vendors print them; sizes are binary (KiB, MiB)


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


@dataclass
class Roof:
    """The best bandwidth and arithmetic rate measured in this run, and what each probe gave."""

    bandwidth_gbps: float
    peak_gflops: float
    probes: dict = field(default_factory=dict)   # name -> best GB/s or GFLOP/s measured
    published: "GpuPeak | None" = None   # the GPU's data sheet, where hwbench knows it

    ridge = property(lambda self: self.peak_gflops / self.bandwidth_gbps,
                     doc="FLOP per byte where the arithmetic, not the memory, becomes the limit.")

    def attainable(self, intensity: float) -> float:
        """Roofline bound in GFLOP/s at this arithmetic intensity: min(peak, bandwidth x it)."""
        return min(self.peak_gflops, self.bandwidth_gbps * intensity)


def roof_violations(kernels: Sequence[Kernel], roof: Roof, tolerance: float = 0.1,
                    cache_bytes: float = 0) -> list[str]:
    """Kernels measured above the roof by more than `tolerance` (a fraction), described."""
    def bound(k: Kernel) -> float:
        # A cache may keep `cache_bytes` of a kernel's data between calls: only the rest crosses
        # the memory bus, and a kernel that fits the cache meets the flat roof alone.
        if k.bytes <= cache_bytes:
            return roof.peak_gflops
        return Roof(roof.bandwidth_gbps * k.bytes / (k.bytes - cache_bytes),
                    roof.peak_gflops).attainable(k.intensity)

    return [f"{k.name}: {k.gflops:.3g} GFLOP/s > roof {bound(k):.3g}"
            for k in kernels if k.gflops > (1 + tolerance) * bound(k)]
