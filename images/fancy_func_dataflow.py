"""Draw images/fancy_func_dataflow.png: the data flow of fancy_func(a, b, c, d)."""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _figure import canvas, link, node, out_dir_arg, save, slide_style  # images/_figure.py

INPUT, OP = "#dbe9f6", "#fde3c8"
MONO = dict(family="DejaVu Sans Mono", fontsize=13)


@slide_style
def figure() -> plt.Figure:
    """The inputs a-d, the two independent adds e and f, and g, which needs both."""
    fig, ax = canvas(6.6, 3.3)
    inputs = {name: node(ax, 0.45, y, 0.42, 0.42, name, fc=INPUT, **MONO)
              for name, y in zip("abcd", (2.55, 1.9, 1.2, 0.55))}
    e = node(ax, 2.55, 2.22, 1.6, 0.46, "e = add(a, b)", fc=OP, **MONO)
    f = node(ax, 2.55, 0.88, 1.6, 0.46, "f = add(c, d)", fc=OP, **MONO)
    g = node(ax, 5.55, 1.55, 1.6, 0.46, "g = add(e, f)", fc=OP, **MONO)
    for name, dst in zip("abcd", (e, e, f, f)):
        link(ax, inputs[name], dst)
    link(ax, e, g)
    link(ax, f, g)
    ax.text(3.3, 3.05, "Data flow of fancy_func: e and f do not depend on each other",
            ha="center", fontsize=13)
    return fig


def main(out_dir) -> pathlib.Path:
    """Write fancy_func_dataflow.png into out_dir and return its path."""
    return save(figure(), __file__, out_dir)


if __name__ == "__main__":
    print(main(out_dir_arg()))
