"""Draw three ways to split training over two GPUs: by layers, within layers, by data.

Run: python images/splitting_the_problem.py images   (writes images/splitting_the_problem.png)
"""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle
from _figure import out_dir_arg, save  # images/_figure.py, beside this script

GPU_COLORS = ("#4C72B0", "#DD8452")  # GPU 0 blue, GPU 1 orange
LAYERS = 4


def box(ax, x, y, w, h, color, label=""):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", alpha=0.85))
    if label:
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=8, color="white")


def arrow(ax, start, end, color="black"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=8, color=color,
                                 lw=0.8))


def by_layers(ax):
    for i in range(LAYERS):
        gpu = 0 if i < LAYERS // 2 else 1
        box(ax, 0.25, 0.3 + i * 0.9, 1.5, 0.55, GPU_COLORS[gpu], f"layer {i + 1}")
        if i:
            arrow(ax, (1.0, 0.3 + (i - 1) * 0.9 + 0.55), (1.0, 0.3 + i * 0.9),
                  "red" if i == LAYERS // 2 else "black")
    ax.text(1.0, -0.15, "activations cross GPUs\nbetween layers (red)", ha="center", va="top",
            fontsize=8)


def within_layers(ax):
    for i in range(LAYERS):
        y = 0.3 + i * 0.9
        box(ax, 0.15, y, 0.8, 0.55, GPU_COLORS[0], "half")
        box(ax, 1.05, y, 0.8, 0.55, GPU_COLORS[1], "half")
        if i:
            for x0 in (0.55, 1.45):
                for x1 in (0.55, 1.45):
                    arrow(ax, (x0, y - 0.35), (x1, y), "red" if x0 != x1 else "black")
    ax.text(1.0, -0.15, "every layer needs both halves\nof the layer below (red)", ha="center",
            va="top", fontsize=8)


def by_data(ax):
    for gpu, x in enumerate((0.1, 1.05)):
        for i in range(LAYERS):
            box(ax, x, 0.3 + i * 0.9, 0.85, 0.55, GPU_COLORS[gpu], f"layer {i + 1}")
            if i:
                arrow(ax, (x + 0.42, 0.3 + (i - 1) * 0.9 + 0.55), (x + 0.42, 0.3 + i * 0.9))
        ax.text(x + 0.42, 0.12, f"batch half {gpu + 1}", ha="center", va="center", fontsize=8)
    arrow(ax, (0.95, 3.5), (1.05, 3.5), "red")
    arrow(ax, (1.05, 3.3), (0.95, 3.3), "red")
    ax.text(1.0, -0.15, "full copy per GPU; only the\ngradients are summed (red)", ha="center",
            va="top", fontsize=8)


def main(out_dir: str) -> pathlib.Path:
    fig, axes = plt.subplots(1, 3, figsize=(9, 4))
    for ax, draw, title in zip(axes, (by_layers, within_layers, by_data),
                               ("across layers\n(pipeline parallelism)",
                                "within layers\n(tensor parallelism)", "data parallelism")):
        draw(ax)
        ax.set_xlim(0, 2)
        ax.set_ylim(-0.8, 4.0)
        ax.set_title(title)
        ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in GPU_COLORS]
    fig.legend(handles, ["GPU 0", "GPU 1"], loc="lower center", ncol=2, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return save(fig, __file__, out_dir, dpi=120)


if __name__ == "__main__":
    print(main(out_dir_arg()))
