"""Draw ring_topology.png: 8 GPUs whose 6 NVLinks each split into two rings (d2l 12.7.2).

Usage: python images/ring_topology.py images
"""
import math
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _figure import out_dir_arg, save  # images/_figure.py, beside this script

# NVLink 2 on a V100: 25 GB/s per link and direction, 6 links, 300 GB/s in all (both directions;
# NVIDIA's V100 data sheet and NVLink page). The book rounds the link to "about 18 GB/s".
LINK = 25
FAST = [1, 2, 3, 4, 5, 6, 7, 8]  # two NVLinks per hop: 2 x 25 GB/s per direction
SLOW = [1, 4, 6, 3, 5, 8, 2, 7]  # one NVLink per hop: 25 GB/s per direction


def position(gpu: int) -> tuple[float, float]:
    angle = math.pi / 2 - 2 * math.pi * (gpu - 1) / 8
    return math.cos(angle), math.sin(angle)


def draw_ring(ax, order, color, width, label, offset=0.0):
    for a, b in zip(order, order[1:] + order[:1]):
        (x0, y0), (x1, y1) = position(a), position(b)
        # Shift parallel to the normal, so that a double link shows as two lines.
        dx, dy = x1 - x0, y1 - y0
        norm = math.hypot(dx, dy)
        nx, ny = -dy / norm * offset, dx / norm * offset
        ax.plot([x0 + nx, x1 + nx], [y0 + ny, y1 + ny], color=color, lw=width,
                solid_capstyle="round", zorder=1, label=label)
        label = None


def draw_gpus(ax):
    for gpu in range(1, 9):
        x, y = position(gpu)
        ax.add_patch(plt.Circle((x, y), 0.15, color="#4c72b0", zorder=2))
        ax.text(x, y, f"GPU{gpu}", color="white", ha="center", va="center", fontsize=8,
                zorder=3, weight="bold")


def main(out_dir: str) -> pathlib.Path:
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.2))
    panels = [
        (f"ring 1: 1-2-3-4-5-6-7-8-1\n2 NVLinks per hop ({2 * LINK} GB/s)", [(FAST, "#dd8452", 0.035),
                                                                       (FAST, "#dd8452", -0.035)]),
        (f"ring 2: 1-4-6-3-5-8-2-7-1\n1 NVLink per hop ({LINK} GB/s)", [(SLOW, "#55a868", 0.0)]),
        ("both rings: 6 NVLinks per GPU\n(data split 2:1 between them)",
         [(FAST, "#dd8452", 0.035), (FAST, "#dd8452", -0.035), (SLOW, "#55a868", 0.0)]),
    ]
    for ax, (title, rings) in zip(axes, panels):
        for order, color, offset in rings:
            draw_ring(ax, order, color, 2.2, None, offset)
        draw_gpus(ax)
        ax.set_title(title, fontsize=10)
        ax.set_xlim(-1.3, 1.3)
        ax.set_ylim(-1.3, 1.3)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.suptitle("Two rings over the NVLinks of 8 V100 GPUs (p3.16xlarge, DGX-1 style); "
                 f"NVLink 2: {LINK} GB/s per link and direction", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.93))  # keep the suptitle clear of the panel titles
    return save(fig, __file__, out_dir, dpi=110)


if __name__ == "__main__":
    print(main(out_dir_arg()))
