"""Draw ring_steps.png: the ring allreduce on n = 4 nodes, step by step (d2l 12.7.2, Fig. 12.7.6).

Each node's data is cut into 4 chunks. Reduce-scatter: in step s node i sends chunk (i - s) mod 4
to node i + 1, which adds it to its own copy. All-gather: node i sends its finished chunk
(i + 1 - s) mod 4 on, and the receiver copies it. The figure is computed by running exactly this
schedule on the sets of nodes whose data each chunk holds.

Usage: python images/ring_steps.py images
"""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from _figure import out_dir_arg, save  # images/_figure.py, beside this script

N = 4
NAMES = "abcd"  # node i's own gradient is called NAMES[i]
COLORS = ["#f7fbff", "#c6dbef", "#6baed6", "#2171b5", "#08306b"]  # by number of summands


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


def main(out_dir: str) -> pathlib.Path:
    rows = list(schedule())
    fig, ax = plt.subplots(figsize=(10, 1.05 * len(rows) + 0.8))
    cell_w, chunk_w, chunk_h, row_h = 2.3, 0.5, 0.55, 1.0
    for r, (title, held, changed) in enumerate(rows):
        y = -r * row_h
        ax.text(-0.1, y + chunk_h + 0.08, title, fontsize=9, ha="left", va="bottom")
        for node in range(N):
            x0 = node * cell_w
            for c in range(N):
                summands = held[node][c]
                thick = (node, c) in changed
                ax.add_patch(Rectangle((x0 + c * chunk_w, y), chunk_w, chunk_h,
                                       fc=COLORS[len(summands)], ec="#d62728" if thick else "k",
                                       lw=2.2 if thick else 0.6, zorder=3 if thick else 2))
                label = "".join(NAMES[k] for k in sorted(summands)) + str(c)
                ax.text(x0 + (c + 0.5) * chunk_w, y + chunk_h / 2, label, ha="center",
                        va="center", fontsize=6.5, zorder=4,
                        color="white" if len(summands) >= 3 else "black")
            if r == 0:
                ax.text(x0 + N * chunk_w / 2, y + chunk_h + 0.45, f"node {node}", ha="center",
                        fontsize=10, weight="bold")
    ax.text(0, -len(rows) * row_h + 0.25,
            "label: whose gradients the chunk holds, then the chunk number (abcd2 = chunk 2 "
            "summed over all 4 nodes); red: just received", fontsize=8.5, ha="left")
    ax.set_xlim(-0.2, N * cell_w)
    ax.set_ylim(-len(rows) * row_h + 0.1, chunk_h + 0.8)
    ax.axis("off")
    fig.suptitle("Ring allreduce on 4 nodes: 3 steps of reduce-scatter, then 3 of all-gather",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return save(fig, __file__, out_dir, dpi=110)


if __name__ == "__main__":
    print(main(out_dir_arg()))
