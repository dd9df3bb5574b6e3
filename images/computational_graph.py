"""Draw the computational graph of a two-layer MLP trained on a CPU and two GPUs.

Run `python images/computational_graph.py images` to write images/computational_graph.png.
"""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402
from _figure import out_dir_arg, save  # images/_figure.py, beside this script

# (column, row) of each node; rows are devices: GPU 0 on top, the CPU in the middle, GPU 1 below.
ROWS = {"gpu0": 2.0, "cpu": 1.0, "gpu1": 0.0}
HALF = 0.7  # half the width of a node
STYLE = {"param": "#d9d9d9", "fwd": "#9ecae1", "bwd": "#fdae6b", "update": "#a1d99b"}


def nodes():
    """Every node: key -> (x, row, label, style)."""
    out = {"W": (0.0, "cpu", "W1, W2\nparameters", "param"),
           "sum": (8.6, "cpu", "sum the\ngradients", "update"),
           "upd": (10.2, "cpu", "update\nW -= lr * grad", "update")}
    for g in ("gpu0", "gpu1"):
        k = g[-1]
        out |= {f"w{k}": (1.6, g, "copy of\nW1, W2", "param"),
                f"h{k}": (3.2, g, f"H = relu(X{k} W1)\nbatch X{k}", "fwd"),
                f"o{k}": (4.8, g, "O = H W2\nloss(O, y)", "fwd"),
                f"g2{k}": (6.4, g, "grad W2", "bwd"),
                f"g1{k}": (8.0, g, "grad W1", "bwd")}
    return out


EDGES = [  # (from, to, kind): compute stays on one device, copies cross the bus
    ("W", "w0", "copy"), ("W", "w1", "copy"),
    ("w0", "h0", "dep"), ("h0", "o0", "dep"), ("o0", "g20", "dep"), ("g20", "g10", "dep"),
    ("w1", "h1", "dep"), ("h1", "o1", "dep"), ("o1", "g21", "dep"), ("g21", "g11", "dep"),
    ("g20", "sum", "copy"), ("g10", "sum", "copy"), ("g21", "sum", "copy"),
    ("g11", "sum", "copy"), ("sum", "upd", "dep"),
]


def draw(ax: plt.Axes) -> None:
    """Draw the graph's lanes, nodes and edges on ax."""
    pos = {}
    for key, (x, row, label, style) in nodes().items():
        y = ROWS[row]
        pos[key] = (x, y)
        ax.add_patch(FancyBboxPatch((x - HALF, y - 0.22), 2 * HALF, 0.44,
                                    boxstyle="round,pad=0.02", fc=STYLE[style], ec="black",
                                    lw=0.8, zorder=2))
        ax.text(x, y, label, ha="center", va="center", fontsize=8, zorder=3)
    for a, b, kind in EDGES:
        (x0, y0), (x1, y1) = pos[a], pos[b]
        dx_, dy_ = x1 - x0, y1 - y0
        # leave the boxes: start and stop at their edges
        if abs(dy_) < 1e-9:
            start, end = (x0 + HALF, y0), (x1 - HALF, y1)
        else:
            start, end = (x0 + 0.1 * dx_, y0 + 0.22 * (1 if dy_ > 0 else -1)), \
                (x1 - 0.1 * dx_, y1 - 0.22 * (1 if dy_ > 0 else -1))
        ax.annotate("", xy=end, xytext=start, zorder=1,
                    arrowprops=dict(arrowstyle="->", lw=1.1,
                                    color="C3" if kind == "copy" else "black",
                                    linestyle="--" if kind == "copy" else "-"))
    for name, y in ROWS.items():
        label = {"gpu0": "GPU 0", "cpu": "CPU", "gpu1": "GPU 1"}[name]
        ax.axhspan(y - 0.45, y + 0.45, color="0.96" if name == "cpu" else "white", zorder=0)
        ax.text(-1.1, y, label, ha="right", va="center", fontsize=10, weight="bold")
    ax.text(4.0, 2.62, "forward", ha="center", fontsize=8, color="#3182bd")
    ax.text(7.2, 2.62, "backward", ha="center", fontsize=8, color="#e6550d")
    ax.plot([], [], "--", color="C3", label="copy over PCIe / NVLink")
    ax.plot([], [], "-", color="black", label="dependency on one device")
    ax.legend(loc="lower right", fontsize=8, bbox_to_anchor=(1.0, -0.12), ncol=2, frameon=False)
    ax.set_xlim(-1.9, 11.1)
    ax.set_ylim(-0.6, 2.8)
    ax.axis("off")


def main(out_dir: str = "images") -> pathlib.Path:
    """Write computational_graph.png into out_dir and return its path."""
    fig, ax = plt.subplots(figsize=(10, 3.6))
    draw(ax)
    ax.set_title("Two-layer MLP, data parallel on two GPUs, parameters kept on the CPU",
                 fontsize=10)
    return save(fig, __file__, out_dir, dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    print(main(out_dir_arg()))
