"""Draw images/compile_pipeline.png: the stages of torch.compile, and when a call recompiles."""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _figure import out_dir_arg, save  # images/_figure.py, beside this script

STAGES = [  # (x, title, what it produces); one box per stage, left to right
    (0.0, "f(x)", "a call of your\ncompiled Python\nfunction"),
    (2.6, "TorchDynamo", "FX graph\n+ guards"),
    (5.2, "AOTAutograd", "forward and\nbackward graphs\n(ATen operators)"),
    (7.8, "TorchInductor", "fused kernels:\nC++ (CPU)\nTriton (GPU)"),
]
BOX_W, BOX_H = 2.0, 1.5


def draw(out_dir: str) -> pathlib.Path:
    """Draw the figure into out_dir and return the file's path."""
    fig, ax = plt.subplots(figsize=(8.5, 3.2))
    for i, (x, title, product) in enumerate(STAGES):
        fc = "#dbe9f6" if i == 0 else "#fde3c8"
        ax.add_patch(plt.Rectangle((x, 0), BOX_W, BOX_H, fc=fc, ec="0.35", lw=1.2))
        ax.text(x + BOX_W / 2, BOX_H - 0.3, title, ha="center", va="center", fontsize=10,
                weight="bold")
        ax.text(x + BOX_W / 2, 0.55, product, ha="center", va="center", fontsize=8.5)
        if i:  # arrow from the previous box
            ax.annotate("", xy=(x, BOX_H / 2), xytext=(STAGES[i - 1][0] + BOX_W, BOX_H / 2),
                        arrowprops=dict(arrowstyle="->", color="0.35", lw=1.4))
    # The first call goes through every stage, and so does a call whose input fails the guards
    # of every cached graph; a call whose guards pass goes straight to the cached kernels.
    ax.text(STAGES[1][0] - 0.3, BOX_H + 0.55, "the first call, or a guard fails\n"
            "(new shape, dtype, device): compile", ha="center", fontsize=8.5, color="#b03a2e")
    ax.annotate("", xy=(STAGES[3][0] + BOX_W / 2, -0.1), xytext=(STAGES[0][0] + BOX_W / 2, -0.1),
                arrowprops=dict(arrowstyle="->", color="#2b7a3d", lw=1.4,
                                connectionstyle="arc3,rad=0.25"))
    ax.text(4.9, -1.55, "later calls: the guards pass, the cached kernels run",
            ha="center", fontsize=8.5, color="#2b7a3d")
    ax.set_xlim(-0.2, 10.0)
    ax.set_ylim(-1.8, 2.6)
    ax.axis("off")
    ax.set_title("torch.compile: capture, differentiate ahead of time, generate code",
                 fontsize=10)
    return save(fig, __file__, out_dir, dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    print(draw(out_dir_arg()))
