"""Draw images/compile_pipeline.png: the stages of torch.compile, and when a call recompiles."""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _figure import canvas, link, node, out_dir_arg, save, slide_style  # images/_figure.py

STAGES = [  # (title, what it produces); one box per stage, left to right
    ("f(x)", "a call of your\ncompiled Python\nfunction"),
    ("TorchDynamo", "FX graph\n+ guards"),
    ("AOTAutograd", "forward and\nbackward graphs\n(ATen operators)"),
    ("TorchInductor", "fused kernels:\nC++ (CPU)\nTriton (GPU)"),
]
COMPILE, CACHED = "#b03a2e", "#2b7a3d"


@slide_style
def figure() -> plt.Figure:
    """Four boxes in a row; red arrows: the compile path; a green arc: the cached path."""
    fig, ax = canvas(9.4, 3.5)
    w, h, y = 1.95, 1.4, 1.75
    boxes = []
    for i, (title, product) in enumerate(STAGES):
        x = 1.1 + 2.4 * i
        boxes.append(node(ax, x, y, w, h, fc="#dbe9f6" if i == 0 else "#fde3c8", lw=1.2))
        ax.text(x, y + h / 2 - 0.25, title, ha="center", va="center", fontsize=13,
                weight="bold")
        ax.text(x, y - 0.18, product, ha="center", va="center", linespacing=1.15)
    for a, b in zip(boxes, boxes[1:]):  # the first call goes through every stage
        link(ax, a, b, color=COMPILE, lw=1.8)
    ax.text(5.8, y + h / 2 + 0.2, "the first call, or a guard fails (new shape, dtype, "
            "device): compile", ha="center", va="bottom", color=COMPILE)
    # A call whose guards pass goes straight to the cached kernels.
    link(ax, (1.1, y - h / 2 - 0.05), (8.15, y - h / 2 - 0.05), color=CACHED, lw=1.8, rad=0.12)
    ax.text(4.6, 0.12, "later calls: the guards pass, the cached kernels run", ha="center",
            va="bottom", color=CACHED)
    ax.text(4.7, 3.45, "torch.compile: capture, differentiate ahead of time, generate code",
            ha="center", va="top", fontsize=13)
    return fig


def main(out_dir) -> pathlib.Path:
    """Write compile_pipeline.png into out_dir and return its path."""
    return save(figure(), __file__, out_dir)


if __name__ == "__main__":
    print(main(out_dir_arg()))
