"""Draw multi_machine_steps.png: the seven steps of one multi-machine training step (d2l 12.7.3).

Usage: python images/multi_machine_steps.py images
"""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402
from _figure import out_dir_arg, save  # images/_figure.py, beside this script

STEPS = [
    "1  each machine reads its own batch, splits it over its GPUs; each GPU computes gradients",
    "2  the GPUs' gradients are summed on one GPU (or sharded over several)",
    "3  the sum is copied to the CPU",
    "4  the CPU sends it to the parameter server, which sums over all machines",
    "5  the server updates the weights and sends them back to every CPU",
    "6  each CPU copies the weights to one GPU (or several)",
    "7  that GPU spreads the weights to the other GPUs",
]


def box(ax, x, y, w, h, text, color):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02",
                                fc=color, ec="black", lw=0.8))
    ax.text(x, y, text, ha="center", va="center", fontsize=8)


def arrow(ax, start, end, step, color, bend=0.0, label_at=0.5, offset=(0.0, 0.0),
          label=True):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, lw=1.2,
                                 color=color, connectionstyle=f"arc3,rad={bend}"))
    if not label:
        return
    x = start[0] + (end[0] - start[0]) * label_at + offset[0]
    y = start[1] + (end[1] - start[1]) * label_at + offset[1]
    ax.text(x, y, str(step), fontsize=8, ha="center", va="center", color="white",
            weight="bold", bbox=dict(boxstyle="circle,pad=0.2", fc=color, ec="none"))


def machine(ax, cx, name):
    box(ax, cx, 3.2, 4.6, 3.7, "", "#f2f2f2")
    ax.text(cx - 2.15, 4.85, name, fontsize=9, ha="left", weight="bold")
    box(ax, cx, 4.3, 1.4, 0.55, "CPU", "#c6dbef")
    gpus = [(cx - 1.65 + 1.1 * i, 2.0) for i in range(4)]
    for i, (x, y) in enumerate(gpus):
        box(ax, x, y, 0.85, 0.55, f"GPU{i}", "#fdd0a2")
        ax.text(x, y - 0.55, "1", fontsize=8, ha="center", va="center", color="white",
                weight="bold", bbox=dict(boxstyle="circle,pad=0.2", fc="#8c6d31", ec="none"))
    g0 = gpus[0]
    for i, (x, y) in enumerate(gpus[1:], 1):
        arrow(ax, (x - 0.2, y + 0.3), (g0[0] + 0.15, g0[1] + 0.3), 2, "#d62728", bend=0.35,
              offset=(0.0, 0.6), label=(i == 2))  # one number for the three arrows
    for i, (x, y) in enumerate(gpus[1:], 1):
        arrow(ax, (g0[0] + 0.15, g0[1] - 0.3), (x - 0.2, y - 0.3), 7, "#9467bd", bend=0.35,
              offset=(0.0, -0.6), label=(i == 2))
    arrow(ax, (g0[0] - 0.05, g0[1] + 0.3), (cx - 0.55, 4.02), 3, "#2ca02c", label_at=0.45,
          offset=(-0.2, 0))
    arrow(ax, (cx - 0.35, 4.02), (g0[0] + 0.25, g0[1] + 0.3), 6, "#17becf", label_at=0.55,
          offset=(0.25, 0))
    return (cx, 4.58)


def main(out_dir: str) -> pathlib.Path:
    fig, ax = plt.subplots(figsize=(11, 7.2))
    box(ax, 5.0, 7.0, 3.0, 0.7, "parameter server\n(sums gradients, updates weights)", "#c7e9c0")
    for cx, name in ((2.4, "machine 1"), (7.6, "machine 2")):
        cpu_top = machine(ax, cx, name)
        toward = 4.2 if cx < 5 else 5.8
        arrow(ax, (cpu_top[0] - 0.2, cpu_top[1]), (toward - 0.3, 6.63), 4, "#1f77b4",
              label_at=0.5, offset=(-0.25, 0))
        arrow(ax, (toward + 0.3, 6.63), (cpu_top[0] + 0.2, cpu_top[1]), 5, "#ff7f0e",
              label_at=0.5, offset=(0.25, 0))
    ax.text(0.1, 0.9, "\n".join(STEPS), fontsize=8.5, va="top", family="monospace")
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.9, 7.6)
    ax.axis("off")
    ax.set_title("Seven steps of synchronous data-parallel training on several machines",
                 fontsize=11)
    fig.tight_layout()
    return save(fig, __file__, out_dir, dpi=100)


if __name__ == "__main__":
    print(main(out_dir_arg()))
