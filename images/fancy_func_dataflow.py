"""Draw images/fancy_func_dataflow.png: the data flow of fancy_func(a, b, c, d)."""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _figure import out_dir_arg, save  # images/_figure.py, beside this script

NODES = {  # name: (x, y, kind)
    "a": (0, 3, "input"), "b": (0, 2, "input"), "c": (0, 1, "input"), "d": (0, 0, "input"),
    "e = add(a, b)": (2, 2.5, "op"), "f = add(c, d)": (2, 0.5, "op"),
    "g = add(e, f)": (4, 1.5, "op"),
}
EDGES = [("a", "e = add(a, b)"), ("b", "e = add(a, b)"), ("c", "f = add(c, d)"),
         ("d", "f = add(c, d)"), ("e = add(a, b)", "g = add(e, f)"),
         ("f = add(c, d)", "g = add(e, f)")]


def draw(out_dir: str) -> pathlib.Path:
    """Draw the figure into out_dir and return the file's path."""
    fig, ax = plt.subplots(figsize=(6, 3))
    for src, dst in EDGES:
        (x0, y0, _), (x1, y1, _) = NODES[src], NODES[dst]
        start = x0 + (0.25 if NODES[src][2] == "input" else 0.85)  # leave the box's edge
        ax.annotate("", xy=(x1 - 0.88, y1), xytext=(start, y0),
                    arrowprops=dict(arrowstyle="->", color="0.35", lw=1.4))
    for name, (x, y, kind) in NODES.items():
        style = dict(boxstyle="circle,pad=0.3", fc="#dbe9f6") if kind == "input" else \
            dict(boxstyle="round,pad=0.4", fc="#fde3c8")
        ax.text(x, y, name, ha="center", va="center", bbox=style, fontsize=10, family="monospace")
    ax.set_xlim(-0.6, 4.9)
    ax.set_ylim(-0.6, 3.6)
    ax.axis("off")
    ax.set_title("Data flow of fancy_func: e and f do not depend on each other", fontsize=10)
    return save(fig, __file__, out_dir, dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    print(draw(out_dir_arg()))
