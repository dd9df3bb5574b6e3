"""A bandwidth-only model of gradient synchronization (d2l 12.7): no latency, links in parallel."""
from typing import Sequence

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

from .checks import non_negative_number, positive_number, whole_number
from .plotting import MIN_POINTS

LABELS = {"one_gpu": "aggregate on one GPU", "cpu": "aggregate on the CPU",
          "sharded": "sharded over all GPUs", "ring": "ring allreduce"}
# How many transfers of the whole size the busiest link makes, per strategy, for n devices.
_TRANSFERS = {
    "one_gpu": lambda n: 2 * (n - 1),      # n-1 GPUs send to GPU0 in turn; it sends the sum back
    "cpu": lambda n: 2 * n,                # all n send to the CPU over its one link, and back
    "sharded": lambda n: 2 * (n - 1) / n,  # each owns 1/n: every link busy at once with size/n
    "ring": lambda n: 2 * (n - 1) / n,     # sharding's traffic on point-to-point links
}
SCALINGS = ("strong", "weak")


def transfer_time(size: float, bandwidth: float) -> float:
    """Seconds to move `size` bytes over one link of `bandwidth` bytes/s."""
    return positive_number(size, "size (bytes)") / positive_number(bandwidth, "bandwidth (bytes/s)")


def sync_time(strategy: str, size: float, n: int, bandwidth: float) -> float:
    """Seconds to sum `size` bytes of gradients over n devices and send the result back to all."""
    n = whole_number(n, "n (number of devices)")
    if strategy not in _TRANSFERS:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(_TRANSFERS)}")
    return _TRANSFERS[strategy](n) * transfer_time(size, bandwidth)


def ring_time(size: float, n: int, busbw: float, approximate: bool = False) -> float:
    """Seconds for a ring allreduce of `size` bytes on n nodes at bus bandwidth `busbw` bytes/s."""
    # Every link carries 2 (n-1)/n of the data, "about 2" in the book (approximate=True).
    # Parallel rings, each given data in proportion to its bandwidth, act as one: pass the sum.
    n = whole_number(n, "n (number of nodes)")
    return (2.0 if approximate else 2.0 * (n - 1) / n) * transfer_time(size, busbw)


def server_time(size: float, workers: int, servers: int, bandwidth: float) -> float:
    """Seconds for m workers to push `size` bytes of gradients to n servers and pull them back."""
    # Each server receives its 1/n share from every worker over its one link, and sends it back.
    m, n = whole_number(workers, "workers"), whole_number(servers, "servers")
    return 2 * m * transfer_time(size, bandwidth) / n


def speedup(k: int, compute_1: float, grad_bytes: float, busbw: float,
            scaling: str = "strong", compute_k: float | None = None) -> float:
    """Predicted samples/s of k devices over one: compute, then an unhidden ring allreduce."""
    # An upper bound for DDP, whose buckets hide part of the allreduce behind backward.
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {', '.join(SCALINGS)}, got {scaling!r}")
    k = whole_number(k, "k (number of devices)")
    compute_1 = positive_number(compute_1, "compute_1 (seconds of one device's step)")
    # Each device computes B/k (strong) or B (weak) in `compute_k` seconds, never less than its
    # share of compute_1: a faster slice (a cache effect) must be measured, not assumed.
    share = compute_1 / k if scaling == "strong" else compute_1
    compute_k = max(non_negative_number(share if compute_k is None else compute_k,
                                        "compute_k (seconds)"), share)
    step_k = compute_k + (ring_time(grad_bytes, k, busbw) if k > 1 else 0.0)
    return (1 if scaling == "strong" else k) * compute_1 / step_k


def plot_sync_costs(size: float = 160e6, bandwidth: float = 16e9, max_devices: int = 8,
                    sizes: Sequence[float] = (10e6, 40e6, 160e6, 640e6), n: int = 4) -> plt.Figure:
    """Plot sync time against the number of devices (at `size`) and the size (at n devices)."""
    fig, (left, right) = plt.subplots(1, 2, layout="constrained")
    counts = list(range(2, whole_number(max_devices, "max_devices") + 1))
    mb = [s / 1e6 for s in sizes]
    for strategy in ("one_gpu", "cpu", "sharded"):
        ms = lambda s, k: sync_time(strategy, s, k, bandwidth) * 1e3
        left.plot(counts, [ms(size, k) for k in counts], "o-", label=LABELS[strategy])
        right.plot(mb, [ms(s, n) for s in sizes], "o-", label=LABELS[strategy])
    left.set(xlabel="number of GPUs", ylabel="ms", ylim=(0, None),
             title=f"{size / 1e6:.0f} MB, {bandwidth / 1e9:.0f} GB/s links")
    right.set(xlabel="gradient size (MB, log scale)", ylabel="ms (log scale)", xscale="log",
              yscale="log", title=f"{n} GPUs, {bandwidth / 1e9:.0f} GB/s links")
    right.set_xticks(mb, [f"{s:g}" for s in mb])
    right.minorticks_off()
    right.yaxis.set_major_locator(LogLocator(base=10))  # 1, 10, 100: few ticks, plainly
    right.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.xaxis.set_major_locator(MaxNLocator(nbins=7, integer=True))
    # Below both panels, in the smallest size a slide may show: never over a curve.
    fig.legend(*left.get_legend_handles_labels(), loc="outside lower center", ncols=2,
               fontsize=MIN_POINTS, frameon=False)
    return fig
