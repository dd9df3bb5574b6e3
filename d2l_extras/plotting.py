"""Pictures of measurements: bar charts, log axes, profiler timelines, rooflines."""
from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from .hardware import MiB
from .bands import Band, errorbars
from .timing import Measurement, format_seconds

# Projected, a slide is about 960 px wide: a 7-inch figure at 100 dpi fills most of it, and 12 pt
# text stays 17 px high there. Every helper below draws at these sizes, never smaller.
SLIDE_STYLE = {
    "figure.figsize": (7.0, 3.6), "figure.dpi": 100, "savefig.dpi": 100,
    "font.size": 12, "axes.titlesize": 13, "axes.labelsize": 12, "xtick.labelsize": 12,
    "ytick.labelsize": 12, "legend.fontsize": 12, "legend.title_fontsize": 12,
    "figure.titlesize": 13, "figure.constrained_layout.use": True,
}
MIN_POINTS = 12  # the smallest text a plot may hold


def use_slide_style() -> dict:
    """Set matplotlib's sizes for a projected slide (12 pt text, 7x3.6 in); return the old ones."""
    old = {key: plt.rcParams[key] for key in SLIDE_STYLE}
    plt.rcParams.update(SLIDE_STYLE)
    return old


def seconds_axis(ax: plt.Axes, axis: str = "y") -> plt.Axes:
    """Label an axis that holds seconds with readable units (250 us, 1.5 ms), not raw seconds."""
    if axis not in ("x", "y"):
        raise ValueError(f"seconds_axis(): axis must be 'x' or 'y', got {axis!r}")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(FuncFormatter(lambda v, _: format_seconds(v) if v else "0"))
    target.set_minor_formatter(NullFormatter())
    return ax


def _bar_value(value: "float | Band | Measurement") -> Band:
    band = getattr(value, "band", value)   # a Measurement carries its band
    return band if isinstance(band, Band) else Band.exact(float(value))


def bar_chart(values: Mapping[str, "float | Band | Measurement"] | Sequence[Measurement],
              ylabel: str = "seconds", title: str | None = None, ax: plt.Axes | None = None,
              log: bool = False, seconds: bool = True, inside: bool = False) -> plt.Axes:
    """Draw labelled bars: {name: value, Band or Measurement}, or Measurements by their name.

    A measured bar is drawn at its median with a whisker over its interquartile range; a plain
    number (a quoted figure, a prediction) has none. The labels sit above the whiskers, or
    inside the bars (`inside=True`: where a line is drawn across the bars' tops).
    """
    if isinstance(values, Mapping):
        items = [(name, _bar_value(v)) for name, v in values.items()]
    else:
        items = [(m.name, _bar_value(m)) for m in values]
    if not items:
        raise ValueError("bar_chart() needs at least one value to draw")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(items)), 3.6))
    names, bands = zip(*items)
    heights = [b.value for b in bands]
    measured = any(b.high > b.low for b in bands)
    bars = ax.bar(names, heights, color=[f"C{i}" for i in range(len(items))],
                  yerr=errorbars(bands) if measured else None, capsize=6 if measured else 0,
                  error_kw={"elinewidth": 1.5, "ecolor": "black"})
    labels = [format_seconds(h) if seconds else f"{h:.3g}" for h in heights]
    if inside:
        ax.bar_label(bars, labels=labels, label_type="center", color="white",
                     fontsize=MIN_POINTS)
    else:
        ax.bar_label(bars, labels=labels, padding=2, fontsize=MIN_POINTS)
    ax.set_ylabel(ylabel)
    top = max(b.high for b in bands)
    if log:
        ax.set_yscale("log")
        log_axis(ax, plain=False)  # room for the labels above the bars
    else:
        ax.set_ylim(0, top * 1.18)  # room for the labels above the bars
        ax.yaxis.set_major_locator(MaxNLocator(6))  # few ticks, readable at 12 pt
    if seconds:  # "25 us" reads better than 2.5 with a 1e-5 offset above the axis
        seconds_axis(ax, "y")
    if title:
        ax.set_title(title)
    return ax


# Timeline colours by kind of work; names not listed get the next colour of the cycle.
# "launch" and "wait" are a CPU thread's calls into CUDA: queueing work, waiting at a barrier.
TIMELINE_COLORS = {"cpu op": "C0", "kernel": "C1", "copy": "C2", "launch": "C4", "wait": "C7"}


def _lane_order(lane: str, first: float) -> tuple:
    # CPU threads on top, then each device's streams together (cuda:2 before cuda:10), each
    # group in order of first activity.
    if lane.startswith("CPU"):
        return (0, 0, "", first)
    device = lane.split(" stream")[0]
    kind, _, index = device.partition(":")
    return (1, int(index) if index.isdigit() else -1, kind, first)


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
    if color_by not in ("kind", "name"):
        raise ValueError(f"color_by must be 'kind' or 'name', got {color_by!r}")
    events = list(events)
    if not events:
        raise ValueError("plot_timeline() needs at least one event (did the profiler record any?)")
    if lanes is None:  # CPU threads on top, then each device's streams
        firsts: dict[str, float] = {}
        for ev in events:
            firsts[ev.lane] = min(firsts.get(ev.lane, ev.start), ev.start)
        lanes = sorted(firsts, key=lambda ln: _lane_order(ln, firsts[ln]))
    lanes = list(lanes)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 1.0 + 0.7 * len(lanes)))
    span = max(ev.start + ev.duration for ev in events) - min(ev.start for ev in events)
    scale, unit = (1e3, "ms") if span < 1 else (1.0, "s")
    colors: dict[str, str] = dict(TIMELINE_COLORS) if color_by == "kind" else {}
    named = []  # (x, w, row, label, duration): placed once the layout is final
    for ev in events:
        if ev.lane not in lanes:
            continue
        key = ev.kind if color_by == "kind" else ev.name
        color = colors.setdefault(key, f"C{len(colors) % 10}")
        row = len(lanes) - 1 - lanes.index(ev.lane)  # first lane at the top
        # keep bars of very short events visible
        x, w = ev.start * scale, max(ev.duration * scale, span * scale * 2e-3)
        ax.broken_barh([(x, w)], (row - 0.35, 0.7), facecolors=color, edgecolors="white",
                       linewidth=0.3, label=key)
        named.append((x, w, row, _short_label(ev.name), ev.duration))
    ax.set_yticks(range(len(lanes)), lanes[::-1])
    ax.set_xlabel(f"time ({unit})")
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles))
    if len(unique) <= 8:
        ax.legend(unique.values(), unique.keys(), loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  fontsize=MIN_POINTS, frameon=False)  # beside the lanes, never over a bar
    if title:
        ax.set_title(title)
    if labels and span > 0:
        # A bar gets its name only where the name fits inside it, measured on the axes as the
        # layout leaves them (lane names and legend take their room first): no label runs into
        # the next bar.
        ax.figure.canvas.draw()
        px_per_second = ax.bbox.width / span
        for x, w, row, label, duration in named:
            if duration * px_per_second > _text_pixels(label, ax.figure.dpi):
                ax.text(x + w / 2, row, label, ha="center", va="center",
                        fontsize=MIN_POINTS, clip_on=True)
    return ax


def plot_roofline(bandwidth_gbps: float, peak_gflops: float, kernels: Sequence = (),
                  ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """Draw the roofline min(peak, bandwidth x intensity) on log axes, kernels as labelled dots."""
    if bandwidth_gbps <= 0 or peak_gflops <= 0:
        raise ValueError(f"plot_roofline needs bandwidth and peak > 0, got "
                         f"{bandwidth_gbps} GB/s and {peak_gflops} GFLOP/s")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    ridge = peak_gflops / bandwidth_gbps  # FLOP/byte where memory stops being the limit
    # Each kernel: anything with .name, .intensity (FLOP/byte) and .gflops (measured).
    xs = [k.intensity for k in kernels] + [ridge]
    lo, hi = min(xs) / 4, max(xs) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(peak_gflops, bandwidth_gbps * x) for x in grid], "k-", lw=2)
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.2g} FLOP/B", (ridge, peak_gflops), textcoords="offset points",
                xytext=(4, -16), fontsize=MIN_POINTS, color="gray")
    ax.annotate(f"memory {bandwidth_gbps:.3g} GB/s", (lo, bandwidth_gbps * lo),
                textcoords="offset points", xytext=(4, 6), fontsize=MIN_POINTS, rotation=0)
    ax.annotate(f"peak {peak_gflops:.3g} GFLOP/s", (hi, peak_gflops), textcoords="offset points",
                xytext=(-4, 4), ha="right", fontsize=MIN_POINTS)
    for i, k in enumerate(kernels):
        band = getattr(k, "gflops_band", None)   # measured kernels: the runs' spread
        err = None if band is None or band.high <= band.low else errorbars([band])
        ax.errorbar(k.intensity, k.gflops, yerr=err, fmt="o", color=f"C{i}", capsize=5,
                    label=k.name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte)")
    ax.set_ylabel("GFLOP/s")
    if kernels:
        ax.legend(fontsize=MIN_POINTS, loc="lower right")
    if title:
        ax.set_title(title)
    return ax


def log_axis(ax: plt.Axes, plain: bool = True) -> plt.Axes:
    """Give a log y-axis room above its labels and, if plain, ticks 1, 2, 5, 10 (not 10^k)."""
    if ax.get_yscale() != "log":
        raise ValueError("log_axis() tidies a log-scaled y-axis: call ax.set_yscale('log') first")
    bottom, top = ax.get_ylim()
    ax.set_ylim(bottom, top * 2.5)
    if plain:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    return ax


def plot_memory_timeline(timeline, ax: plt.Axes | None = None, title: str | None = None,
                         label: str = "allocated") -> plt.Axes:
    """Draw MiB over time from a MemoryTimeline (memory.py): allocated, reserved (CUDA), shaded phases."""
    times, allocated = list(timeline.times), list(timeline.allocated)
    if len(times) != len(allocated) or len(times) < 2:
        raise ValueError("plot_memory_timeline() needs a timeline with at least one allocation "
                         "(did the call allocate anything on that device?)")
    if ax is None:
        _, ax = plt.subplots()
    ax.step(times, [b / MiB for b in allocated], where="post", color="C0", label=label)
    if timeline.reserved is not None:
        ax.step(times, [b / MiB for b in timeline.reserved], where="post", color="C3",
                ls="--", label="reserved")
    top = max(max(allocated), max(timeline.reserved or [0])) / MiB
    for i, (name, start, end) in enumerate(timeline.phases):
        ax.axvspan(start, end, color=f"C{i + 4}", alpha=0.15, lw=0, label=name)
    # Phases are named in the legend, above the curves: short phases never crowd their names.
    ax.set_ylim(0, top * 1.45 or 1)
    ax.set_xlim(0, max(times))
    ax.set_ylabel("MiB above the start")
    ax.set_xlabel("time in the step")
    seconds_axis(ax, "x")
    ax.legend(loc="upper left", ncol=2, fontsize=MIN_POINTS, frameon=False)
    if title:
        ax.set_title(title)
    return ax
