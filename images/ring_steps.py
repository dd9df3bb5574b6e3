"""Draw ring_steps.png: the ring allreduce on n = 4 nodes, step by step (d2l 12.7.2, Fig. 12.7.6).

Each node's data is cut into 4 chunks. Reduce-scatter: in step s node i sends chunk (i - s) mod 4
to node i + 1, which adds it to its own copy. All-gather: node i sends its finished chunk
(i + 1 - s) mod 4 on, and the receiver copies it. The figure is computed by running exactly this
schedule on the sets of nodes whose data each chunk holds.

Each chunk is labelled with the letters of the nodes whose gradients it holds; the chunk numbers
head the columns (the labels fit 12 pt text that way).

Usage: python images/ring_steps.py images
"""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from _figure import canvas, out_dir_arg, save, slide_style  # images/_figure.py, beside this

N = 4
NAMES = "abcd"  # node i's own gradient is called NAMES[i]
COLORS = ["#f7fbff", "#c6dbef", "#6baed6", "#2171b5", "#08306b"]  # by number of summands
CHUNK_W, CHUNK_H, NODE_GAP, LEFT = 0.5, 0.36, 0.12, 1.0  # inches
PITCH, GROUP_GAP = 0.46, 0.16  # from one row to the next, and extra between phases


def _offset(k: int) -> str:
    # "i", "i+1", "i-2": the chunk a node sends, relative to its own number.
    return "i" if k == 0 else f"i{k:+d}"


def _copy(held):
    return [[set(c) for c in node] for node in held]


def schedule(n: int = N):
    """Yield (title, holdings, changed) for the start and every step of the ring."""
    held = [[{i} for _ in range(n)] for i in range(n)]  # held[node][chunk]: whose data is in it
    yield "start: node i holds its own gradient, cut into 4 chunks", _copy(held), set()
    for s in range(n - 1):
        sends = [(i, (i + 1) % n, (i - s) % n) for i in range(n)]
        before = _copy(held)  # every node sends at the same time
        for src, dst, c in sends:
            held[dst][c] |= before[src][c]
        yield (f"reduce-scatter {s + 1}: node i sends chunk {_offset(-s)} to node i+1, "
               f"which adds it to its own", _copy(held), {(dst, c) for _, dst, c in sends})
    for s in range(n - 1):
        sends = [(i, (i + 1) % n, (i + 1 - s) % n) for i in range(n)]
        before = _copy(held)
        for src, dst, c in sends:
            held[dst][c] = set(before[src][c])
        yield (f"all-gather {s + 1}: node i sends the finished chunk {_offset(1 - s)} to node "
               f"i+1, which copies it", _copy(held), {(dst, c) for _, dst, c in sends})


def row_ys(top: float) -> list[float]:
    """The centre of each row: start, 3 reduce-scatter steps, 3 all-gather steps."""
    ys, y = [], top
    for r in range(2 * N - 1):
        if r in (1, N):  # a phase begins
            y -= GROUP_GAP
        ys.append(y)
        y -= PITCH
    return ys


def draw_row(ax, y, held, changed):
    for node in range(N):
        x0 = LEFT + node * (N * CHUNK_W + NODE_GAP)
        for c in range(N):
            summands, thick = held[node][c], (node, c) in changed
            ax.add_patch(Rectangle((x0 + c * CHUNK_W, y - CHUNK_H / 2), CHUNK_W, CHUNK_H,
                                   fc=COLORS[len(summands)], ec="#d62728" if thick else "k",
                                   lw=2.4 if thick else 0.6, zorder=3 if thick else 2))
            ax.text(x0 + (c + 0.5) * CHUNK_W, y, "".join(NAMES[k] for k in sorted(summands)),
                    ha="center", va="center", zorder=4,
                    color="white" if len(summands) >= 3 else "black")


@slide_style
def figure() -> plt.Figure:
    """One row per step, one block of 4 chunks per node."""
    rows = list(schedule())
    fig, ax = canvas(9.4, 5.0)
    ys = row_ys(3.8)
    for node in range(N):
        x0 = LEFT + node * (N * CHUNK_W + NODE_GAP)
        ax.text(x0 + N * CHUNK_W / 2, 4.45, f"node {node}", ha="center", va="center",
                weight="bold")
        for c in range(N):
            ax.text(x0 + (c + 0.5) * CHUNK_W, 4.15, str(c), ha="center", va="center",
                    color="0.4")
    ax.text(LEFT - 0.1, 4.15, "chunk", ha="right", va="center", color="0.4")
    labels = ["start"] + [f"step {s + 1}" for s in range(N - 1)] * 2
    for y, label, (_, held, changed) in zip(ys, labels, rows):
        ax.text(LEFT - 0.1, y, label, ha="right", va="center")
        draw_row(ax, y, held, changed)
    for name, first in (("reduce-scatter", 1), ("all-gather", N)):
        middle = (ys[first] + ys[first + N - 2]) / 2
        ax.text(0.12, middle, name, rotation=90, ha="center", va="center", weight="bold")
    ax.text(LEFT, 0.22, "letters: whose gradients the chunk holds (darker: more of them); "
            "red: just received", va="center")
    ax.text(4.7, 4.95, f"Ring allreduce on {N} nodes: {N - 1} steps of reduce-scatter, then "
            f"{N - 1} of all-gather", ha="center", va="top", fontsize=13)
    return fig


def main(out_dir) -> pathlib.Path:
    """Write ring_steps.png into out_dir and return its path."""
    return save(figure(), __file__, out_dir)


if __name__ == "__main__":
    print(main(out_dir_arg()))
