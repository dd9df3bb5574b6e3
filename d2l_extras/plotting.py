"""Pictures of measurements for a room: bar charts, profiler timelines, rooflines."""
from typing import Iterable, Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from .bands import Band, _band
from .timing import Measurement, format_seconds

# Projected, a slide is about 960 px wide: a 7-inch figure at 100 dpi fills most of it, and 12 pt
# text stays 17 px high there. Every helper below draws at these sizes, never smaller.
MIN_POINTS = 12  # the smallest text a plot may hold
SLIDE_STYLE = {"figure.figsize": (7.0, 3.6), "figure.dpi": 100, "savefig.dpi": 100,
               "font.size": 12, "axes.titlesize": 13, "axes.labelsize": 12, "xtick.labelsize": 12,
               "ytick.labelsize": 12, "legend.fontsize": 12, "legend.title_fontsize": 12,
               "figure.titlesize": 13, "figure.constrained_layout.use": True}
# Timeline colours by kind of work ("launch", "wait": a CPU thread's calls into CUDA).
TIMELINE_COLORS = {"cpu op": "C0", "kernel": "C1", "copy": "C2", "launch": "C4", "wait": "C7"}


def use_slide_style() -> dict:
    """Set matplotlib's sizes for a projected slide (12 pt text, 7x3.6 in); return the old ones."""
    _draw_inline()
    old = {key: plt.rcParams[key] for key in SLIDE_STYLE}
    plt.rcParams.update(SLIDE_STYLE)
    return old


def _draw_inline() -> None:
    # Headless runners often export MPLBACKEND=Agg, under which a notebook draws nothing: in a
    # Jupyter kernel, figures go inline whatever the environment says.
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if getattr(shell := get_ipython(), "kernel", None) is not None:
        shell.run_line_magic("matplotlib", "inline")


def _whiskers(bands: Iterable["Band | float"]) -> list[list[float]]:
    # Matplotlib's `yerr` for bands (and Measurements): each median's distance to either end.
    bands = [_band(b) for b in bands]
    return [[b.value - b.low for b in bands], [b.high - b.value for b in bands]]


def bar_chart(values: Mapping[str, "float | Band | Measurement"], ylabel: str = "seconds",
              title: str | None = None, ax: plt.Axes | None = None, seconds: bool = True,
              inside: bool = False) -> plt.Axes:
    """Draw labelled bars, measured ones with a whisker over their interquartile range."""
    names, bands = zip(*((name, _band(v)) for name, v in values.items()))
    ax = ax or plt.subplots(figsize=(max(5.0, 1.6 * len(names)), 3.6))[1]
    heights = [b.value for b in bands]
    bars = ax.bar(names, heights, color=[f"C{i}" for i in range(len(names))])
    # Whiskers on measured bars only: a quoted constant has no spread to draw.
    measured = [i for i, b in enumerate(bands) if b.high > b.low]
    if measured:
        ax.errorbar(measured, [heights[i] for i in measured], fmt="none", capsize=6,
                    yerr=_whiskers([bands[i] for i in measured]), elinewidth=1.5, ecolor="black")
    # Plain numbers: 3 significant digits, thousands in full (5,524, not 5.52e+03).
    labels = [format_seconds(h) if seconds else f"{h:,.0f}" if abs(h) >= 1e3 else f"{h:.3g}"
              for h in heights]
    if inside:   # where a line will cross the bars' tops
        ax.bar_label(bars, labels, fontsize=MIN_POINTS, label_type="center", color="white")
    else:        # above the whisker's top, where no line runs through it
        for x, (label, band) in enumerate(zip(labels, bands)):
            ax.annotate(label, (x, band.high), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=MIN_POINTS)
    ax.set_ylabel(ylabel)
    _tilt_if_crowded(ax, names)
    ax.set_ylim(0, max(b.high for b in bands) * 1.18)   # room for the labels above the bars
    ax.yaxis.set_major_locator(MaxNLocator(6))
    if seconds:  # readable units (250 us, 1.5 ms), not raw seconds
        ax.yaxis.set_major_formatter(lambda v, _: format_seconds(v) if v else "0")
    ax.set_title(title or ax.get_title())
    return ax


def _tilt_if_crowded(ax: plt.Axes, names: Sequence[str]) -> None:
    # Names wider than their bar's share of the axes would run into each other: each on one
    # line, tilted 30 degrees, which leaves a line's height between neighbours.
    fig, size = ax.figure, ax.get_xticklabels()[0].get_fontsize()
    slot = ax.get_position().width * fig.get_figwidth() * fig.dpi / len(names)
    widest = max(_text_pixels(line, fig.dpi, size) for n in names for line in n.split("\n"))
    if widest > slot:   # the estimate is generous: at the limit, names still part
        ax.set_xticks(range(len(names)), [n.replace("\n", " ") for n in names], rotation=30,
                      ha="right", rotation_mode="anchor")


def _lane_order(lane: str, first: float) -> tuple:
    # CPU threads on top, then each device's streams together (cuda:2 before cuda:10), each
    # group in order of first activity.
    cpu = lane.startswith("CPU")
    kind, _, index = ("" if cpu else lane.split(" stream")[0]).partition(":")
    return (not cpu, int(index) if index.isdigit() else -1, kind, first)


def _short_label(name: str) -> str:
    # "autograd::engine::evaluate_function: MmBackward0" -> "MmBackward0";
    # "Memcpy DtoH (Device -> Pinned)" -> "Memcpy DtoH"
    if name.startswith(("Memcpy ", "Memset ")):
        name = name.split(" (")[0]
    return name.rsplit(": ", 1)[-1].removeprefix("aten::")[:18]


def _text_pixels(text: str, dpi: float, points: float = MIN_POINTS) -> float:
    # About 0.62 em per character in the default sans-serif font, plus a little margin.
    return (0.62 * len(text) + 0.8) * points * dpi / 72


def plot_timeline(events: Sequence, ax: plt.Axes | None = None, title: str | None = None,
                  color_by: str = "kind", lanes: Sequence[str] | None = None,
                  labels: bool = True) -> plt.Axes:
    """Draw a Gantt chart of events (with .name .lane .start .duration .kind), one row per lane."""
    events = list(events)
    if not events:
        raise ValueError("plot_timeline() needs at least one event (did the profiler record any?)")
    span = max(ev.start + ev.duration for ev in events) - min(ev.start for ev in events)
    if lanes is None:  # each lane's first start: the latest-sorted, earliest event wins
        firsts = {ev.lane: ev.start for ev in sorted(events, key=lambda ev: -ev.start)}
        lanes = sorted(firsts, key=lambda lane: _lane_order(lane, firsts[lane]))
    ax = ax or plt.subplots(figsize=(8, 1.0 + 0.7 * len(lanes)))[1]
    scale, unit = (1e3, "ms") if span < 1 else (1.0, "s")
    colors = dict(TIMELINE_COLORS) if color_by == "kind" else {}
    shown: set[str] = set()  # keys in the legend so far: one entry each
    named = []  # (x, w, row, label, duration): labelled once the layout is final
    for ev in (ev for ev in events if ev.lane in lanes):
        key = getattr(ev, color_by)
        row = len(lanes) - 1 - lanes.index(ev.lane)  # first lane at the top
        x, w = ev.start * scale, max(ev.duration * scale, span * scale * 2e-3)  # short: visible
        ax.broken_barh([(x, w)], (row - 0.35, 0.7), edgecolors="white", linewidth=0.3,
                       facecolors=colors.setdefault(key, f"C{len(colors) % 10}"),
                       label=None if key in shown else key)
        shown.add(key)
        named.append((x, w, row, _short_label(ev.name), ev.duration))
    ax.set_yticks(range(len(lanes)), lanes[::-1])
    ax.set_xlabel(f"time ({unit})")
    if 0 < len(shown) <= 8:  # beside the lanes, never over a bar
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=MIN_POINTS, frameon=False)
    ax.set_title(title or ax.get_title())
    if labels and span > 0:
        # A bar gets its name only where it fits inside, measured on the axes as the layout
        # leaves them (lane names and legend take their room first).
        ax.figure.canvas.draw()
        for x, w, row, label, duration in named:
            if duration * ax.bbox.width / span > _text_pixels(label, ax.figure.dpi):
                ax.text(x + w / 2, row, label, ha="center", va="center", fontsize=MIN_POINTS,
                        clip_on=True)
    return ax


def plot_roofline(bandwidth_gbps: float, peak_gflops: float, kernels: Sequence = (),
                  ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """Draw the roofline min(peak, bandwidth x intensity) on log axes, kernels as labelled dots."""
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    ridge = peak_gflops / bandwidth_gbps  # FLOP/byte where memory stops being the limit
    # Each kernel: anything with .name, .intensity (FLOP/byte) and .gflops (measured).
    xs = [k.intensity for k in kernels] + [ridge]
    lo, hi = min(xs) / 4, max(xs) * 4
    ax.plot([lo, ridge, hi], [bandwidth_gbps * lo, peak_gflops, peak_gflops], "k-", lw=2)
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    text = {"textcoords": "offset points", "fontsize": MIN_POINTS}  # xytext: points from xy
    ax.annotate(f"ridge {ridge:.2g} FLOP/B", (ridge, peak_gflops), (4, -16), color="gray", **text)
    # Above the lines, where no kernel sits (each is under the roof): the slope's label left
    # of its middle, the peak's under a top raised to leave it room.
    mid = (lo * ridge) ** 0.5
    ax.annotate(f"memory {bandwidth_gbps:.3g} GB/s", (mid, bandwidth_gbps * mid), (-8, 4),
                ha="right", **text)
    ax.annotate(f"peak {peak_gflops:.3g} GFLOP/s", (hi, peak_gflops), (-4, 5), ha="right", **text)
    for i, k in enumerate(kernels):
        band = getattr(k, "gflops_band", None)   # measured kernels: the runs' spread
        err = _whiskers([band]) if band is not None and band.high > band.low else None
        ax.errorbar(k.intensity, k.gflops, yerr=err, fmt="o", color=f"C{i}", capsize=5,
                    label=k.name)
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP per byte)",
           ylabel="GFLOP/s", ylim=(None, peak_gflops * 3))
    if kernels:
        ax.legend(fontsize=MIN_POINTS, loc="lower right")
    ax.set_title(title or ax.get_title())
    return ax

