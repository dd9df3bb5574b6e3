"""Draw ring_topology.png: 8 GPUs whose 6 NVLinks each split into two rings (d2l 12.7.2).

Usage: python images/ring_topology.py images
"""
import math
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _figure import canvas, out_dir_arg, save, slide_style  # images/_figure.py, beside this

# NVLink 2 on a V100: 25 GB/s per link and direction, 6 links, 300 GB/s in all (both directions;
# NVIDIA's V100 data sheet and NVLink page). The book rounds the link to "about 18 GB/s".
LINK = 25
FAST = [1, 2, 3, 4, 5, 6, 7, 8]  # two NVLinks per hop: 2 x 25 GB/s per direction
SLOW = [1, 4, 6, 3, 5, 8, 2, 7]  # one NVLink per hop: 25 GB/s per direction
FAST_COLOR, SLOW_COLOR = "#dd8452", "#55a868"
PANEL_W, RADIUS, CY = 3.1, 1.12, 1.55  # inches: panel width, ring radius, ring centre height


def position(gpu: int, cx: float) -> tuple[float, float]:
    angle = math.pi / 2 - 2 * math.pi * (gpu - 1) / 8
    return cx + RADIUS * math.cos(angle), CY + RADIUS * math.sin(angle)


def draw_ring(ax, cx, order, color, offset=0.0):
    for a, b in zip(order, order[1:] + order[:1]):
        (x0, y0), (x1, y1) = position(a, cx), position(b, cx)
        # Shift parallel to the normal, so that a double link shows as two lines.
        dx, dy = x1 - x0, y1 - y0
        norm = math.hypot(dx, dy)
        nx, ny = -dy / norm * offset, dx / norm * offset
        ax.plot([x0 + nx, x1 + nx], [y0 + ny, y1 + ny], color=color, lw=2.2,
                solid_capstyle="round", zorder=1)


def draw_gpus(ax, cx):
    for gpu in range(1, 9):
        x, y = position(gpu, cx)
        ax.add_patch(plt.Circle((x, y), 0.19, color="#4c72b0", zorder=2))
        ax.text(x, y, str(gpu), color="white", ha="center", va="center", fontsize=13,
                zorder=3, weight="bold")


@slide_style
def figure() -> plt.Figure:
    """Ring 1, ring 2, and both together, side by side."""
    fig, ax = canvas(3 * PANEL_W, 3.95)
    double = [(FAST, FAST_COLOR, 0.045), (FAST, FAST_COLOR, -0.045)]
    panels = [
        (f"ring 1: 1-2-3-4-5-6-7-8-1\n2 NVLinks per hop ({2 * LINK} GB/s)", double),
        (f"ring 2: 1-4-6-3-5-8-2-7-1\n1 NVLink per hop ({LINK} GB/s)", [(SLOW, SLOW_COLOR, 0)]),
        ("both rings: 6 NVLinks per GPU\n(data split 2:1 between them)",
         double + [(SLOW, SLOW_COLOR, 0.0)]),
    ]
    for i, (title, rings) in enumerate(panels):
        cx = (i + 0.5) * PANEL_W
        for order, color, offset in rings:
            draw_ring(ax, cx, order, color, offset)
        draw_gpus(ax, cx)
        ax.text(cx, CY + RADIUS + 0.27, title, ha="center", va="bottom", linespacing=1.15)
    ax.text(1.5 * PANEL_W, 3.9, f"8 V100 GPUs as in a p3.16xlarge; NVLink 2: {LINK} GB/s per "
            "link and direction", ha="center", va="top", fontsize=13)
    return fig


def main(out_dir) -> pathlib.Path:
    """Write ring_topology.png into out_dir and return its path."""
    return save(figure(), __file__, out_dir)


if __name__ == "__main__":
    print(main(out_dir_arg()))
