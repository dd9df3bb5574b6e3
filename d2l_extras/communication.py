"""A bandwidth-only model of gradient synchronization (d2l 12.7): no latency, links in parallel."""
from .checks import positive_number, whole_number


def ring_time(size: float, n: int, busbw: float, approximate: bool = False) -> float:
    """Seconds for a ring allreduce of `size` bytes on n nodes at bus bandwidth `busbw` bytes/s."""
    # Every link carries 2 (n-1)/n of the data, "about 2" in the book (approximate=True).
    # Parallel rings, each given data in proportion to its bandwidth, act as one: pass the sum.
    n = whole_number(n, "n (number of nodes)")
    share = 2.0 if approximate else 2.0 * (n - 1) / n
    seconds = positive_number(size, "size (bytes)") / positive_number(busbw, "busbw (bandwidth)")
    return share * seconds


def speedup(k: int, compute_1: float, grad_bytes: float, busbw: float,
            scaling: str = "strong", compute_k: float | None = None) -> float:
    """Predicted samples/s of k devices over one: compute, then an unhidden ring allreduce."""
    # An upper bound for DDP, whose buckets hide part of the allreduce behind backward.
    if scaling not in ("strong", "weak"):
        raise ValueError(f"scaling must be one of strong, weak, got {scaling!r}")
    k = whole_number(k, "k (number of devices)")
    compute_1 = positive_number(compute_1, "compute_1 (seconds of one device's step)")
    # Each device computes B/k (strong) or B (weak) in `compute_k` seconds, never less than its
    # share of compute_1: a faster slice (a cache effect) must be measured, not assumed.
    share = compute_1 / k if scaling == "strong" else compute_1
    if compute_k is not None:
        share = max(positive_number(compute_k, "compute_k (seconds)"), share)
    step_k = share + (ring_time(grad_bytes, k, busbw) if k > 1 else 0.0)
    return (1 if scaling == "strong" else k) * compute_1 / step_k
