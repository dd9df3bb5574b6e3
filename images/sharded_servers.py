"""Draw sharded_servers.png: one parameter server against n sharded ones (d2l 12.7.3, Fig. 12.7.8).

Left: m = 4 workers push their whole gradient to one server, whose single link carries m times
the gradient, O(m). Right: n = 4 servers each own a quarter of the parameters; worker k sends
quarter j of its gradient to server j, so every server's link carries m/n gradients, O(m/n).
Pulls go back along the same arrows.

Usage: python images/sharded_servers.py images
"""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402
from _figure import out_dir_arg, save  # images/_figure.py, beside this script

M = 4  # workers
SHARD_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]


def worker(ax, x, y, k):
    # A worker's gradient, drawn as 4 slices (one per shard).
    ax.text(x + 0.5, y + 0.55, f"worker {k}", ha="center", fontsize=8)
    for j, color in enumerate(SHARD_COLORS):
        ax.add_patch(Rectangle((x + 0.25 * j, y), 0.25, 0.4, fc=color, ec="k", lw=0.5))


def server(ax, x, y, colors, label):
    width = 0.25 * len(colors)
    for j, color in enumerate(colors):
        ax.add_patch(Rectangle((x - width / 2 + 0.25 * j, y), 0.25, 0.4, fc=color, ec="k",
                               lw=0.5))
    ax.text(x, y - 0.3, label, ha="center", fontsize=8)


def arrow(ax, start, end, color, width):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=8, lw=width,
                                 color=color, alpha=0.8))


def main(out_dir: str) -> pathlib.Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [0.3 + 1.6 * k for k in range(M)]
    for ax in (left, right):
        for k, x in enumerate(xs):
            worker(ax, x, 3.0, k)
    # One server: every worker's whole gradient goes down one link.
    server(left, 2.9, 0.6, SHARD_COLORS, "one server holds all parameters")
    for x in xs:
        arrow(left, (x + 0.5, 2.95), (2.9, 1.05), "#555555", 2.0)
    left.text(2.9, -0.35, f"its link carries {M} gradients: time O(m)", ha="center",
              fontsize=9, weight="bold")
    left.set_title("one parameter server", fontsize=10)
    # Sharded: slice j of every worker's gradient goes to server j.
    for j, color in enumerate(SHARD_COLORS):
        server(right, xs[j] + 0.5, 0.6, [color], f"server {j}: shard {j}")
        for x in xs:
            arrow(right, (x + 0.25 * j + 0.125, 2.95), (xs[j] + 0.5, 1.05), color, 1.0)
    right.text(2.9, -0.35, f"each link carries {M} quarters = 1 gradient: time O(m/n)",
               ha="center", fontsize=9, weight="bold")
    right.set_title(f"{M} servers, each owns 1/{M} of the parameters", fontsize=10)
    for ax in (left, right):
        ax.set_xlim(0, 6.3)
        ax.set_ylim(-0.6, 3.8)
        ax.axis("off")
    fig.suptitle("push: gradients go down the arrows and are summed by the owner; "
                 "pull: the weights come back up", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return save(fig, __file__, out_dir, dpi=110)


if __name__ == "__main__":
    print(main(out_dir_arg()))
