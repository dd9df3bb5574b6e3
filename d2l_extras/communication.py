"""What communication costs: a bandwidth-only model of gradient synchronization (d2l 12.7).

Every transfer of `size` bytes over a link of `bandwidth` bytes/s takes size / bandwidth
seconds; latency and compute are ignored. Links of a PCIe switch run at full bandwidth at the
same time, but one device's link carries one transfer at a time. The book's example:

>>> round(sync_time("one_gpu", 160e6, 4, 16e9) * 1e3)   # 160 MB, 4 GPUs, 16 GB/s links
60
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

from .checks import non_negative_number, positive_number, whole_number
from .plotting import MIN_POINTS

STRATEGIES = ("one_gpu", "cpu", "sharded", "ring")
# Human-readable names for plots and tables.
LABELS = {"one_gpu": "aggregate on one GPU", "cpu": "aggregate on the CPU",
          "sharded": "sharded over all GPUs", "ring": "ring allreduce"}


def transfer_time(size: float, bandwidth: float) -> float:
    """Seconds to move `size` bytes over one link of `bandwidth` bytes/s."""
    return positive_number(size, "size (bytes)") / positive_number(bandwidth, "bandwidth (bytes/s)")


def sync_time(strategy: str, size: float, n: int, bandwidth: float) -> float:
    """Seconds to sum `size` bytes of gradients over n devices and send the result back to all."""
    n = whole_number(n, "n (number of devices)")
    t = transfer_time(size, bandwidth)
    if strategy == "one_gpu":
        # n-1 GPUs send to GPU0 one after another over its single link, then it sends back.
        return 2 * (n - 1) * t
    if strategy == "cpu":
        # All n GPUs send to the CPU over its one link, and it sends the sum to all n.
        return 2 * n * t
    if strategy == "sharded":
        # Device i owns 1/n of the gradient: every link is busy at once with pieces of size/n.
        return 2 * (n - 1) * t / n
    if strategy == "ring":
        # Same traffic per link as sharding, on point-to-point links (reduce-scatter, all-gather).
        return ring_time(size, n, bandwidth)
    raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")


def ring_time(size: float, n: int, busbw: float, approximate: bool = False) -> float:
    """Seconds for a ring allreduce of `size` bytes on n nodes at bus bandwidth `busbw` bytes/s.

    Every link carries 2 (n-1)/n of the data; with approximate=True that factor is taken as 2
    (the book's "(n-1)/n is about 1"). Parallel rings, each given a share of the data
    proportional to its bandwidth, act as one ring of their summed bandwidth: pass the sum.
    """
    n = whole_number(n, "n (number of nodes)")
    factor = 2.0 if approximate else 2.0 * (n - 1) / n
    return factor * transfer_time(size, busbw)


def server_time(size: float, workers: int, servers: int, bandwidth: float) -> float:
    """Seconds for m workers to push `size` bytes of gradients to n servers and pull them back.

    Server j holds 1/n of the parameters and receives that share from every worker over its
    one network link, then sends the updated share back: 2 m size / (n bandwidth), O(m/n).
    """
    m = whole_number(workers, "workers")
    n = whole_number(servers, "servers")
    return 2 * m * transfer_time(size, bandwidth) / n


SCALINGS = ("strong", "weak")


def step_time(k: int, compute_time: float, grad_bytes: float, busbw: float) -> float:
    """Predicted seconds of a data-parallel step: compute + 2 (k-1)/k N / busbw, unhidden.

    `compute_time` is t_compute of one device's share of the batch (B/k for strong scaling, B
    for weak); `busbw` is the ring's bus bandwidth (what `ring.bus_bandwidth` measures), so
    the allreduce of N = grad_bytes takes 2 (k-1)/k N / busbw. Nothing overlaps backward:
    an upper bound for DDP, whose buckets hide part of it.
    """
    k = whole_number(k, "k (number of devices)")
    compute_time = non_negative_number(compute_time, "compute_time (seconds)")
    return compute_time + (ring_time(grad_bytes, k, busbw) if k > 1 else 0.0)


def speedup(k: int, compute_1: float, grad_bytes: float, busbw: float,
            scaling: str = "strong", compute_k: float | None = None) -> float:
    """Predicted samples/s of k devices over one device, from `step_time`.

    Strong scaling keeps the global batch B: each device computes B/k, `compute_k` seconds
    (default compute_1 / k, work proportional to the batch), and never less than that: a slice
    timed below its share of the work would predict more than k times the speed, a cache effect
    that a measurement must show before a model assumes it. Weak scaling keeps B per device:
    k devices process k B per step, each in `compute_k` (default compute_1, and at least that).
    """
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {', '.join(SCALINGS)}, got {scaling!r}")
    k = whole_number(k, "k (number of devices)")
    t1 = step_time(1, compute_1, grad_bytes, busbw)
    if t1 == 0:
        raise ValueError("compute_1 must be > 0: one device's step takes some time")
    if compute_k is None:
        compute_k = compute_1 / k if scaling == "strong" else compute_1
    # The work per device never takes less than its share: no speed-up above k, unexplained.
    share = compute_1 / k if scaling == "strong" else compute_1
    compute_k = max(non_negative_number(compute_k, "compute_k (seconds)"), share)
    tk = step_time(k, compute_k, grad_bytes, busbw)
    return (1 if scaling == "strong" else k) * t1 / tk


def plot_sync_costs(size: float = 160e6, bandwidth: float = 16e9, max_devices: int = 8,
                    sizes: Sequence[float] = (10e6, 40e6, 160e6, 640e6),
                    n: int = 4) -> plt.Figure:
    """Plot sync time against the number of devices (at `size`) and the size (at n devices)."""
    fig, (left, right) = plt.subplots(1, 2, layout="constrained")
    counts = range(2, whole_number(max_devices, "max_devices") + 1)
    for strategy in STRATEGIES[:3]:
        left.plot(list(counts), [sync_time(strategy, size, k, bandwidth) * 1e3 for k in counts],
                  "o-", label=LABELS[strategy])
        right.plot([s / 1e6 for s in sizes], [sync_time(strategy, s, n, bandwidth) * 1e3
                                              for s in sizes], "o-", label=LABELS[strategy])
    left.set(xlabel="number of GPUs", ylabel="ms", ylim=(0, None),
             title=f"{size / 1e6:.0f} MB, {bandwidth / 1e9:.0f} GB/s links")
    right.set(xlabel="gradient size (MB, log scale)", ylabel="ms (log scale)", xscale="log",
              yscale="log", title=f"{n} GPUs, {bandwidth / 1e9:.0f} GB/s links")
    right.set_xticks([s / 1e6 for s in sizes], [f"{s / 1e6:g}" for s in sizes])
    right.minorticks_off()
    right.yaxis.set_major_locator(LogLocator(base=10))  # 1, 10, 100: few ticks, plainly
    right.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.xaxis.set_major_locator(MaxNLocator(nbins=7, integer=True))
    # Below both panels, in the smallest size a slide may show: never over a curve.
    fig.legend(*left.get_legend_handles_labels(), loc="outside lower center", ncols=2,
               fontsize=MIN_POINTS, frameon=False)
    return fig
