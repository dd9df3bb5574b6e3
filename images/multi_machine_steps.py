"""Draw multi_machine_steps.png: the seven steps of one multi-machine training step (d2l 12.7.3).

Usage: python images/multi_machine_steps.py images
"""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _figure import canvas, link, node, out_dir_arg, save, slide_style  # images/_figure.py

STEPS = [  # (colour of the step's arrows and number, what happens)
    ("#8c6d31", "each GPU: gradients of its share of the batch"),
    ("#d62728", "the GPUs' gradients are summed on one GPU"),
    ("#2ca02c", "that GPU copies the sum to the CPU"),
    ("#1f77b4", "the CPU sends it to the parameter server"),
    ("#ff7f0e", "the server sums, updates, returns the weights"),
    ("#17becf", "the CPU copies the weights to one GPU"),
    ("#9467bd", "that GPU copies them to the other GPUs"),
]
GPU_Y, GPU_W, GPU_H, GPU_PITCH = 1.95, 0.95, 0.42, 1.08  # inches
CPU_Y, CPU_H = 3.0, 0.4
SERVER_Y, SERVER_H = 4.25, 0.58


def badge(ax, x, y, step):
    """The step's number in a circle of its colour."""
    ax.text(x, y, str(step), ha="center", va="center", color="white", weight="bold", zorder=5,
            bbox=dict(boxstyle="circle,pad=0.18", fc=STEPS[step - 1][0], ec="none"))


def arrow(ax, start, end, step, rad=0.0, at=0.5, numbered=True):
    """An arrow of step's colour; its number sits on the arrow, a fraction `at` along it."""
    link(ax, start, end, color=STEPS[step - 1][0], lw=1.6, rad=rad)
    if numbered:  # the point of an arc3 curve at `at` (a quadratic Bezier curve)
        (x0, y0), (x1, y1) = start, end
        cx, cy = (x0 + x1) / 2 + rad * (y1 - y0), (y0 + y1) / 2 - rad * (x1 - x0)
        u = 1 - at
        badge(ax, u * u * x0 + 2 * u * at * cx + at * at * x1,
              u * u * y0 + 2 * u * at * cy + at * at * y1, step)


def machine(ax, cx, name, server_x):
    """One machine: its CPU and 4 GPUs, with steps 1-3 and 6-7, and steps 4-5 to the server."""
    node(ax, cx, 2.3, 4.44, 2.3, fc="#f2f2f2", ec="0.3", zorder=0)
    ax.text(cx + 2.12, 3.3, name, ha="right", va="center", weight="bold")
    gx = cx - 1.62  # GPU0, the GPU that talks to the CPU
    px = gx - 0.1
    node(ax, px, CPU_Y, 0.9, CPU_H, "CPU", fc="#c6dbef", ec="black")
    top, bottom = GPU_Y + GPU_H / 2, GPU_Y - GPU_H / 2
    for i in range(4):
        x = gx + GPU_PITCH * i
        node(ax, x, GPU_Y, GPU_W, GPU_H, fc="#fdd0a2", ec="black")
        ax.text(x - 0.15, GPU_Y, f"GPU{i}", ha="center", va="center", zorder=3)
        badge(ax, x + 0.27, GPU_Y, 1)
    for i in (1, 2, 3):  # step 2 arcs above the GPUs, step 7 below; one number for each
        x = gx + GPU_PITCH * i - 0.2
        arrow(ax, (x, top), (gx + 0.03 + 0.12 * i, top), 2, rad=0.25, numbered=i == 3)
        arrow(ax, (gx + 0.03 + 0.12 * i, bottom), (x, bottom), 7, rad=0.25, numbered=i == 3)
    arrow(ax, (gx - 0.35, top), (gx - 0.35, CPU_Y - CPU_H / 2), 3)
    arrow(ax, (gx + 0.05, CPU_Y - CPU_H / 2), (gx + 0.05, top), 6)
    server_bottom = SERVER_Y - SERVER_H / 2
    arrow(ax, (px - 0.15, CPU_Y + CPU_H / 2), (server_x, server_bottom), 4, at=0.4)
    arrow(ax, (server_x + 0.35, server_bottom), (px + 0.2, CPU_Y + CPU_H / 2), 5, at=0.4)


@slide_style
def figure() -> plt.Figure:
    """A parameter server above two machines; the seven steps listed below them."""
    fig, ax = canvas(9.4, 5.15)
    node(ax, 4.7, SERVER_Y, 3.3, SERVER_H, "parameter server\nsums gradients, updates weights",
         fc="#c7e9c0", ec="black", linespacing=1.15)
    machine(ax, 2.35, "machine 1", 3.35)
    machine(ax, 7.05, "machine 2", 5.9)
    for i, (_, text) in enumerate(STEPS):
        x, y = (0.3 if i < 4 else 4.9), 0.86 - 0.245 * (i % 4)
        badge(ax, x, y, i + 1)
        ax.text(x + 0.2, y, text, va="center")
    ax.text(4.7, 5.1, "Seven steps of synchronous data-parallel training on several machines",
            ha="center", va="top", fontsize=13)
    return fig


def main(out_dir) -> pathlib.Path:
    """Write multi_machine_steps.png into out_dir and return its path."""
    return save(figure(), __file__, out_dir)


if __name__ == "__main__":
    print(main(out_dir_arg()))
