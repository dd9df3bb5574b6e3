"""Pictures of measurements: bar charts of timings."""
from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt

from .timing import Measurement, format_seconds


def bar_chart(values: Mapping[str, float] | Sequence[Measurement], ylabel: str = "seconds",
              title: str | None = None, ax: plt.Axes | None = None, log: bool = False,
              seconds: bool = True) -> plt.Axes:
    """Draw labelled bars: a {name: value} mapping, or Measurements by their warm median."""
    if isinstance(values, Mapping):
        items = list(values.items())
    else:
        items = [(m.name, m.median) for m in values]
    if not items:
        raise ValueError("bar_chart() needs at least one value to draw")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.5, 1.2 * len(items)), 3))
    names, heights = zip(*items)
    bars = ax.bar(names, heights, color=[f"C{i}" for i in range(len(items))])
    labels = [format_seconds(h) if seconds else f"{h:.3g}" for h in heights]
    ax.bar_label(bars, labels=labels, padding=2, fontsize=9)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, max(heights) * 1.18)  # room for the labels above the bars
    if title:
        ax.set_title(title)
    return ax
