"""The performance model: one call takes about max(overhead, bytes / bandwidth, flops / peak).

Three numbers of a machine are enough for a first estimate: the fixed cost of one call (Python,
the dispatcher, a kernel launch), the memory bandwidth and the peak arithmetic rate. Whichever
term is largest names the regime an operation is in, and so what would make it faster.
"""
from __future__ import annotations

from dataclasses import dataclass

from .checks import non_negative_number, positive_number

# The three terms of the model, and the name of the regime where each one is the largest.
REGIMES = {"overhead": "overhead-bound", "memory": "memory-bound", "compute": "compute-bound"}


@dataclass(frozen=True)
class PerformanceModel:
    """A machine in three numbers: seconds per call, bytes per second, FLOP per second."""

    overhead_s: float   # fixed seconds per call, whatever it computes
    bandwidth: float    # bytes per second between memory and the processor
    peak: float         # floating point operations per second

    def __post_init__(self) -> None:
        positive_number(self.overhead_s, "PerformanceModel: overhead_s (seconds per call)")
        positive_number(self.bandwidth, "PerformanceModel: bandwidth (bytes per second)")
        positive_number(self.peak, "PerformanceModel: peak (FLOP per second)")

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
        """'overhead-bound', 'memory-bound' or 'compute-bound': where the largest term comes from."""
        terms = self.terms(flops, n_bytes)
        return REGIMES[max(terms, key=terms.get)]
