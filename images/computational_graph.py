"""Draw the computational graph of a two-layer MLP trained on a CPU and two GPUs.

Run `python images/computational_graph.py images` to write images/computational_graph.png.
"""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _figure import canvas, link, node, out_dir_arg, save, slide_style  # images/_figure.py

# Rows are devices: GPU 0 on top, the CPU in the middle, GPU 1 below (y in inches).
ROWS = {"GPU 0": 2.95, "CPU": 1.9, "GPU 1": 0.85}
STYLE = {"param": "#d9d9d9", "fwd": "#9ecae1", "bwd": "#fdae6b", "update": "#a1d99b"}
COPY = "#c0392b"
NODE_H = 0.58


def nodes():
    """Every node: key -> (x centre, row, width, label, style); sizes in inches."""
    out = {"W": (1.35, "CPU", 1.15, "W1, W2\nparameters", "param"),
           "sum": (6.5, "CPU", 1.0, "sum the\ngradients", "update"),
           "upd": (7.99, "CPU", 1.37, "update\nW -= lr * grad", "update")}
    for row in ("GPU 0", "GPU 1"):
        k = row[-1]
        out |= {f"w{k}": (1.35, row, 1.15, "copy of\nW1, W2", "param"),
                f"h{k}": (2.98, row, 1.6, f"H = relu(X{k} W1)\nbatch X{k}", "fwd"),
                f"o{k}": (4.56, row, 1.05, "O = H W2\nloss(O, y)", "fwd"),
                f"g2{k}": (5.79, row, 0.92, "grad W2", "bwd"),
                f"g1{k}": (6.96, row, 0.92, "grad W1", "bwd")}
    return out


EDGES = [  # (from, to, kind): compute stays on one device, copies cross the bus
    ("W", "w0", "copy"), ("W", "w1", "copy"),
    ("w0", "h0", "dep"), ("h0", "o0", "dep"), ("o0", "g20", "dep"), ("g20", "g10", "dep"),
    ("w1", "h1", "dep"), ("h1", "o1", "dep"), ("o1", "g21", "dep"), ("g21", "g11", "dep"),
    ("g20", "sum", "copy"), ("g10", "sum", "copy"), ("g21", "sum", "copy"),
    ("g11", "sum", "copy"), ("sum", "upd", "dep"),
]


def draw(ax: plt.Axes) -> None:
    """Draw the graph's lanes, nodes and edges on ax (in inches)."""
    boxes = {}
    for key, (x, row, w, label, style) in nodes().items():
        boxes[key] = node(ax, x, ROWS[row], w, NODE_H, label, fc=STYLE[style], ec="black",
                          lw=0.8, linespacing=1.1)
    for a, b, kind in EDGES:
        if kind == "copy":
            link(ax, boxes[a], boxes[b], color=COPY, lw=1.5, linestyle=(0, (4, 2)))
        else:
            link(ax, boxes[a], boxes[b], color="black", lw=1.2)
    for name, y in ROWS.items():
        ax.axhspan(y - 0.45, y + 0.45, color="0.94" if name == "CPU" else "white", zorder=0)
        ax.text(0.65, y, name, ha="right", va="center", weight="bold")
    top = ROWS["GPU 0"] + NODE_H / 2 + 0.08
    ax.text(3.77, top, "forward", ha="center", va="bottom", color="#3182bd", weight="bold")
    ax.text(6.375, top, "backward", ha="center", va="bottom", color="#e6550d", weight="bold")
    for x, style, color, label in ((0.3, (0, (4, 2)), COPY, "copy between devices "
                                    "(PCIe / NVLink)"),
                                   (5.0, "-", "black", "dependency on one device")):
        ax.plot([x, x + 0.45], [0.17, 0.17], linestyle=style, color=color, lw=1.5)
        ax.text(x + 0.55, 0.17, label, va="center")


@slide_style
def figure() -> plt.Figure:
    """The graph, with its title."""
    fig, ax = canvas(8.9, 4.05)
    draw(ax)
    ax.text(4.45, 4.0, "Two-layer MLP, data parallel on two GPUs, parameters on the CPU",
            ha="center", va="top", fontsize=13)
    return fig


def main(out_dir: str = "images") -> pathlib.Path:
    """Write computational_graph.png into out_dir and return its path."""
    return save(figure(), __file__, out_dir)


if __name__ == "__main__":
    print(main(out_dir_arg()))
