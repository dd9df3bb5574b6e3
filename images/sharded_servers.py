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
from matplotlib.patches import Rectangle  # noqa: E402
from _figure import canvas, link, out_dir_arg, save, slide_style  # images/_figure.py

M = 4  # workers
SHARD_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
PANEL_W, PITCH, SLICE = 4.7, 1.15, 0.2  # inches
WORKER_Y, SERVER_Y, BAR_H = 2.75, 0.95, 0.3  # bottom of the workers' and the servers' bars


def bar(ax, x, y, colors, width=SLICE):
    """A gradient (or a server's parameters) as slices, one per shard, centred on x."""
    left = x - width * len(colors) / 2
    for j, color in enumerate(colors):
        ax.add_patch(Rectangle((left + width * j, y), width, BAR_H, fc=color, ec="k", lw=0.6))


def workers(ax, x0):
    xs = [x0 + 0.6 + PITCH * k for k in range(M)]
    for k, x in enumerate(xs):
        bar(ax, x, WORKER_Y, SHARD_COLORS)
        ax.text(x, WORKER_Y + BAR_H + 0.06, f"worker {k}", ha="center", va="bottom")
    return xs


def below(ax, x0, text):
    ax.text(x0 + PANEL_W / 2, 0.08, text, ha="center", va="bottom", weight="bold",
            linespacing=1.15)


@slide_style
def figure() -> plt.Figure:
    """Left: every worker pushes its whole gradient to one server; right: shards."""
    fig, ax = canvas(2 * PANEL_W, 4.35)
    # One server: every worker's whole gradient goes down one link.
    centre = PANEL_W / 2
    for k, x in enumerate(workers(ax, 0)):  # arrowheads side by side on the server's bar
        end = (centre + (k - (M - 1) / 2) * SLICE, SERVER_Y + BAR_H + 0.03)
        link(ax, (x, WORKER_Y - 0.03), end, color="#555555", lw=2.2)
    bar(ax, centre, SERVER_Y, SHARD_COLORS)
    ax.text(centre, SERVER_Y - 0.06, "one server holds all parameters", ha="center", va="top")
    below(ax, 0, f"its link carries {M} gradients:\ntime O(m)")
    # Sharded: slice j of every worker's gradient goes to server j.
    xs = workers(ax, PANEL_W)
    for j, (color, xj) in enumerate(zip(SHARD_COLORS, xs)):
        bar(ax, xj, SERVER_Y, [color], width=0.3)
        ax.text(xj, SERVER_Y - 0.06, f"server {j}", ha="center", va="top")
        for k, x in enumerate(xs):
            start = (x - 2 * SLICE + SLICE * (j + 0.5), WORKER_Y - 0.03)
            end = (xj + (k - (M - 1) / 2) * 0.075, SERVER_Y + BAR_H + 0.03)
            link(ax, start, end, color=color, lw=1.2, alpha=0.85)
    below(ax, PANEL_W, f"each link carries {M} quarters\n= 1 gradient: time O(m/n)")
    ax.plot([PANEL_W, PANEL_W], [0.1, 3.85], color="0.75", lw=1)
    for x0, title in ((0, "one parameter server"),
                      (PANEL_W, f"{M} servers, each owns 1/{M} of the parameters")):
        ax.text(x0 + PANEL_W / 2, 3.78, title, ha="center", va="top", fontsize=13)
    ax.text(PANEL_W, 4.3, "push: gradients go down the arrows, the owner sums them; "
            "pull: the weights come back up", ha="center", va="top")
    return fig


def main(out_dir) -> pathlib.Path:
    """Write sharded_servers.png into out_dir and return its path."""
    return save(figure(), __file__, out_dir)


if __name__ == "__main__":
    print(main(out_dir_arg()))
