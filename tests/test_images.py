"""Every figure in images/ is drawn by the script beside it, readable on a slide (issue 16).

The PNGs are shown at their natural size (100 dpi) in the notebooks and on 1280 px wide slides, so
a figure must be at most 9.6 in wide and its text at least 12 pt, and its labels must not collide.
"""
import importlib.util
import itertools
import os
import pathlib
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.image import imread  # noqa: E402
from matplotlib.text import Text  # noqa: E402

IMAGES = pathlib.Path(__file__).parents[1] / "images"
SCRIPTS = sorted(IMAGES.glob("[!_]*.py"))  # _figure.py is their shared saving code
MIN_POINTS = 12
MAX_WIDTH_PX = 960  # 9.6 in at 100 dpi
MAX_HEIGHT_PX = 600  # leaves a 700 px slide room for a heading


def load(script: pathlib.Path):
    """Import a figure script as a module (images/ on sys.path, for its `from _figure import`)."""
    if str(IMAGES) not in sys.path:
        sys.path.insert(0, str(IMAGES))
    spec = importlib.util.spec_from_file_location(f"figure_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shown_texts(fig):
    """The Text artists a reader sees: visible, with something written in them."""
    fig.canvas.draw()
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


@pytest.fixture(params=SCRIPTS, ids=lambda p: p.name)
def figure(request):
    fig = load(request.param).figure()
    yield fig
    plt.close(fig)


def test_every_png_has_its_script():
    for png in IMAGES.glob("*.png"):
        assert png.with_suffix(".py").exists(), f"{png.name} has no script that draws it"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_draws_its_figure(script, tmp_path):
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, timeout=120,
                   capture_output=True, env={**os.environ, "MPLBACKEND": "Agg"})
    drawn = tmp_path / script.with_suffix(".png").name
    assert drawn.stat().st_size > 1000
    committed = IMAGES / drawn.name
    assert committed.exists(), f"commit {drawn.name} (run: make figures)"
    height, width = imread(drawn).shape[:2]
    assert width <= MAX_WIDTH_PX, f"{drawn.name} is {width} px wide: it would be scaled down"
    assert height <= MAX_HEIGHT_PX, f"{drawn.name} is {height} px tall: too tall for a slide"
    assert imread(committed).shape == imread(drawn).shape, \
        f"images/{drawn.name} is out of date (run: make figures)"
    assert committed.stat().st_size < 150_000, f"keep {drawn.name} small"


def test_every_text_is_at_least_12_points(figure):
    small = [(t.get_text(), t.get_fontsize()) for t in shown_texts(figure)
             if t.get_fontsize() < MIN_POINTS]
    assert not small, f"text below {MIN_POINTS} pt: {small}"
    assert shown_texts(figure), "a figure without text cannot be checked"


def test_figure_fits_a_slide_at_100_dpi(figure):
    width, height = figure.get_size_inches() * 100
    assert width <= MAX_WIDTH_PX and height <= MAX_HEIGHT_PX, (width, height)


def test_texts_stay_inside_and_do_not_collide(figure):
    renderer = figure.canvas.get_renderer()
    frame = figure.bbox
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in shown_texts(figure)]
    for text, box in boxes:
        assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1, f"{text!r} is cut at a side"
        assert frame.y0 - 1 <= box.y0 and box.y1 <= frame.y1 + 1, f"{text!r} is cut at an edge"
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        overlap_x = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        overlap_y = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        assert overlap_x <= 1 or overlap_y <= 1, f"{a!r} and {b!r} overlap"
