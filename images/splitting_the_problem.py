"""Draw three ways to split training over two GPUs: by layers, within layers, by data.

Run: python images/splitting_the_problem.py images   (writes images/splitting_the_problem.png)
"""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _figure import canvas, link, node, out_dir_arg, save, slide_style  # images/_figure.py

GPU_COLORS = ("#4C72B0", "#DD8452")  # GPU 0 blue, GPU 1 orange
LAYERS = 4
PANEL_W = 3.1  # inches per panel
ROW_Y = [1.35 + 0.74 * i for i in range(LAYERS)]  # centre of layer i + 1
BOX_H = 0.4
CROSS = "#d62728"  # data that crosses between the GPUs


def box(ax, x, y, w, gpu, label):
    return node(ax, x, y, w, BOX_H, label, fc=GPU_COLORS[gpu], ec="black", color="white")


def up(ax, x_from, x_to, i, color="black"):
    """An arrow from the top of layer i + 1 (at x_from) to the bottom of layer i + 2 (at x_to)."""
    link(ax, (x_from, ROW_Y[i] + BOX_H / 2), (x_to, ROW_Y[i + 1] - BOX_H / 2), color=color,
         lw=1.6 if color == CROSS else 1.2)


def caption(ax, x0, text):
    ax.text(x0 + PANEL_W / 2, 0.82, text, ha="center", va="top", linespacing=1.15)


def by_layers(ax, x0):
    for i, y in enumerate(ROW_Y):
        box(ax, x0 + 1.55, y, 1.9, 0 if i < LAYERS // 2 else 1, f"layer {i + 1}")
        if i + 1 < LAYERS:
            up(ax, x0 + 1.55, x0 + 1.55, i, CROSS if i + 1 == LAYERS // 2 else "black")
    caption(ax, x0, "activations cross GPUs\nbetween layers (red)")


def within_layers(ax, x0):
    xs = (x0 + 0.9, x0 + 2.2)
    for i, y in enumerate(ROW_Y):
        for gpu, x in enumerate(xs):
            box(ax, x, y, 1.15, gpu, "half")
            for x_to in xs if i + 1 < LAYERS else ():
                up(ax, x, x_to, i, CROSS if x_to != x else "black")
    caption(ax, x0, "every layer needs both halves\nof the layer below (red)")


def by_data(ax, x0):
    for gpu, x in enumerate((0.9, 2.2)):
        for i, y in enumerate(ROW_Y):
            box(ax, x0 + x, y, 1.15, gpu, f"layer {i + 1}")
            if i + 1 < LAYERS:
                up(ax, x0 + x, x0 + x, i)
        ax.text(x0 + x, ROW_Y[0] - BOX_H / 2 - 0.06, f"batch half {gpu + 1}", ha="center",
                va="top")
    top = ROW_Y[-1] + BOX_H / 2 + 0.04
    link(ax, (x0 + 0.9, top), (x0 + 2.2, top), color=CROSS, lw=1.6, style="<|-|>", rad=-0.4)
    caption(ax, x0, "full copy per GPU; only the\ngradients are summed (red)")


@slide_style
def figure() -> plt.Figure:
    """Three panels side by side, a legend of the two GPUs' colours below."""
    fig, ax = canvas(3 * PANEL_W, 4.75)
    titles = ("across layers\n(pipeline parallelism)", "within layers\n(tensor parallelism)",
              "data parallelism")
    for i, (draw, title) in enumerate(zip((by_layers, within_layers, by_data), titles)):
        x0 = i * PANEL_W
        draw(ax, x0)
        ax.text(x0 + PANEL_W / 2, 4.7, title, ha="center", va="top", fontsize=13,
                linespacing=1.15)
    for gpu, x in enumerate((3.55, 5.0)):
        node(ax, x, 0.17, 0.35, 0.22, fc=GPU_COLORS[gpu], ec="black")
        ax.text(x + 0.28, 0.17, f"GPU {gpu}", va="center")
    return fig


def main(out_dir) -> pathlib.Path:
    """Write splitting_the_problem.png into out_dir and return its path."""
    return save(figure(), __file__, out_dir)


if __name__ == "__main__":
    print(main(out_dir_arg()))
