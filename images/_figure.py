"""What every figure script shares: the slide style, a canvas measured in inches, and saving.

Every script defines `figure()`, which returns the drawn matplotlib figure (tests/test_images.py
checks its text sizes and width), and `main(out_dir)`, which saves it as SCRIPT_NAME.png.

The PNGs are shown at their natural size in a notebook and on a 960 px wide slide: saved at
DPI = 100 and at most MAX_WIDTH inches wide, so that they are never scaled down and 12 pt text
stays 12 pt on the screen.
"""
from __future__ import annotations

import functools
import pathlib
import sys

import matplotlib.pyplot as plt
from PIL import Image
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

MIN_POINTS = 12     # the smallest text a figure may hold (as d2l_extras.MIN_POINTS)
DPI = 100           # pixels per inch of the saved PNG, which is shown at its natural size
MAX_WIDTH = 9.5     # inches: 950 px, within a 960 px slide
MAX_HEIGHT = 5.2    # inches: leaves a 700 px slide room for a heading and two lines of text
STYLE = {
    "font.family": "DejaVu Sans", "font.size": MIN_POINTS, "axes.titlesize": 13,
    "figure.titlesize": 13, "legend.fontsize": MIN_POINTS, "xtick.labelsize": MIN_POINTS,
    "ytick.labelsize": MIN_POINTS, "axes.labelsize": MIN_POINTS, "figure.dpi": DPI,
}


def slide_style(draw):
    """Decorator: run a figure-drawing function under STYLE (12 pt text unless told larger)."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with plt.rc_context(STYLE):
            return draw(*args, **kwargs)
    return wrapper


def canvas(width: float, height: float) -> tuple[plt.Figure, plt.Axes]:
    """A figure of width x height inches whose one axes fills it, with data units in inches.

    Drawing in inches makes text sizes and box sizes comparable: 12 pt text is 1/6 in tall and
    about 0.09 in per character wide.
    """
    if width > MAX_WIDTH or height > MAX_HEIGHT:
        raise ValueError(f"a figure is at most {MAX_WIDTH} x {MAX_HEIGHT} in, "
                         f"not {width} x {height}")
    fig = plt.figure(figsize=(width, height), dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    return fig, ax


def out_dir_arg() -> pathlib.Path:
    """The folder named on the command line, else images/ itself (as `make figures` runs it)."""
    return pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parent


PALETTE = 64


def save(fig: plt.Figure, script: str, out_dir: str | pathlib.Path) -> pathlib.Path:
    """Save fig as SCRIPT_NAME.png in out_dir at DPI, at its own size; close it; return the path."""
    path = pathlib.Path(out_dir) / (pathlib.Path(script).stem + ".png")
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    # Flat-coloured diagrams need few colours: a 64-colour palette makes the file about 3.5 times
    # smaller, and every notebook carries its figures inline (tools/hosted.py).
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=PALETTE, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)
    return path


def node(ax: plt.Axes, x: float, y: float, w: float, h: float, text: str = "",
         fc: str = "white", ec: str = "0.25", lw: float = 1.0, zorder: float = 2,
         **text_kw) -> FancyBboxPatch:
    """A rounded box of w x h centred on (x, y), with text in its middle; returns the box.

    Arrows (link) are drawn at zorder 1, under boxes; a box that holds others takes zorder 0.
    """
    box = FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.06",
                         fc=fc, ec=ec, lw=lw, zorder=zorder)
    ax.add_patch(box)
    if text:
        ax.text(x, y, text, ha="center", va="center", zorder=3, **text_kw)
    return box


def centre(box: FancyBboxPatch) -> tuple[float, float]:
    """The middle of a box drawn by node()."""
    return box.get_x() + box.get_width() / 2, box.get_y() + box.get_height() / 2


def link(ax: plt.Axes, a, b, color: str = "0.3", lw: float = 1.4, style: str = "-|>",
         rad: float = 0.0, **arrow) -> FancyArrowPatch:
    """An arrow from a to b, each a node() box (clipped at its edge) or an (x, y) point."""
    start = centre(a) if isinstance(a, FancyBboxPatch) else a
    end = centre(b) if isinstance(b, FancyBboxPatch) else b
    patch = FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=14, color=color, lw=lw,
                            connectionstyle=f"arc3,rad={rad}", zorder=1,
                            patchA=a if isinstance(a, FancyBboxPatch) else None,
                            patchB=b if isinstance(b, FancyBboxPatch) else None,
                            shrinkA=2, shrinkB=2, **arrow)
    ax.add_patch(patch)
    return patch
