import math

import matplotlib
import matplotlib.pyplot as plt
import pytest
from matplotlib.container import ErrorbarContainer

import d2l_extras as dx


def test_bar_chart_from_mapping():
    ax = dx.bar_chart({"eager": 2e-3, "compiled": 1e-3}, title="t")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["eager", "compiled"]
    assert [round(p.get_height(), 6) for p in ax.patches] == [2e-3, 1e-3]
    assert ax.get_title() == "t"
    plt.close("all")


def test_bar_chart_from_measurements_uses_median():
    m = dx.timing.Measurement("x", cold=1.0, warm=[3.0, 1.0, 2.0])
    ax = dx.bar_chart({"x": m})
    assert ax.patches[0].get_height() == 2.0
    plt.close("all")


def test_whiskers_over_the_interquartile_range_of_measured_bars_only():
    m = dx.timing.Measurement("x", cold=1.0, warm=[1.0, 2.0, 3.0, 4.0, 5.0])   # 3, quartiles 2 and 4
    ax = dx.bar_chart({"measured": m, "quoted": 2.5, "band": dx.Band(1.0, 0.5, 1.5)})
    whiskers = next(c for c in ax.containers if isinstance(c, ErrorbarContainer))
    lines = whiskers.lines[2][0].get_segments()
    assert [(seg[0, 0], *seg[:, 1]) for seg in lines] == [(0, 2.0, 4.0), (2, 0.5, 1.5)], \
        "no whisker (nor cap) on the quoted constant, bar 1"
    assert ax.get_ylim()[1] >= 4.0, "room for the whisker and its label"
    plain = dx.bar_chart({"a": 1.0, "b": 2.0})
    assert not any(isinstance(c, ErrorbarContainer) for c in plain.containers), \
        "quoted numbers have no spread to draw"
    plt.close("all")


def test_bar_chart_labels_seconds_with_units_not_raw_seconds():
    ax = dx.bar_chart({"a": 2.5e-5, "b": 3e-5})
    formatter = ax.yaxis.get_major_formatter()
    assert formatter(2e-5, 0) == "20 us" and formatter(2e-3, 0) == "2 ms"
    assert formatter(1.5, 0) == "1.5 s" and formatter(0, 0) == "0"
    plt.close("all")


def test_slide_style_sets_readable_sizes_and_returns_the_old_ones():
    old = dx.use_slide_style()
    try:
        assert plt.rcParams["font.size"] >= dx.plotting.MIN_POINTS
        assert all(plt.rcParams[k] >= dx.plotting.MIN_POINTS for k in
                   ("xtick.labelsize", "ytick.labelsize", "legend.fontsize", "axes.labelsize"))
        assert tuple(plt.rcParams["figure.figsize"]) == dx.plotting.SLIDE_STYLE["figure.figsize"]
    finally:
        plt.rcParams.update(old)
    assert set(old) == set(dx.plotting.SLIDE_STYLE)


def _texts(fig):
    return [t for t in fig.findobj(matplotlib.text.Text) if t.get_text()]


def test_helpers_draw_no_text_below_the_minimum():
    old = dx.use_slide_style()
    try:
        ax = dx.bar_chart({"eager": 2e-3, "compiled": 1e-3})
        events = [dx.profiling.TimelineEvent("aten::mm", "CPU thread 1", 0.0, 1e-3, "cpu op"),
                  dx.profiling.TimelineEvent("copy", "cuda:0 stream 7", 5e-4, 1e-3, "copy")]
        tl = dx.plot_timeline(events)
        kernel = type("K", (), {"name": "axpy", "intensity": 0.1, "gflops": 1.0})()
        roof = dx.plot_roofline(10.0, 100.0, [kernel])
        for a in (ax, tl, roof):
            a.figure.canvas.draw()
            small = [(t.get_text(), t.get_fontsize()) for t in _texts(a.figure)
                     if t.get_fontsize() < dx.plotting.MIN_POINTS]
            assert not small, small
    finally:
        plt.rcParams.update(old)
        plt.close("all")


def test_bar_chart_writes_large_plain_numbers_in_full():
    ax = dx.bar_chart({"cpu": 338.2, "gpu": 5524.4}, seconds=False)
    assert [t.get_text() for t in ax.texts] == ["338", "5,524"]


@pytest.mark.parametrize("names", [["eager", "compiled", "reduce-overhead"],
                                   ["eager", "compiled\nempty", "compiled\ncached"],
                                   ["eager", "compiled\nempty", "compiled\ncached",
                                    "r-o\nempty", "r-o\ncached"]])
def test_bar_chart_names_never_collide(names):
    with plt.rc_context(dx.plotting.SLIDE_STYLE):  # 12 pt, as the notebooks draw
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        ax = dx.bar_chart(dict(zip(names, range(1, len(names) + 1))), ax=axes[1])
        labels, renderer = ax.get_xticklabels(), fig.canvas.get_renderer()
        boxes = [t.get_window_extent(renderer) for t in labels]
        angle = math.radians(labels[0].get_rotation())
        line = labels[0].get_fontsize() * 1.2 * fig.dpi / 72
        plt.close(fig)
    apart = [b.x1 - a.x1 for a, b in zip(boxes, boxes[1:])]  # tilted: anchored at the right
    if angle:  # parallel lines of text: a line's height between neighbours
        assert all("\n" not in t.get_text() for t in labels)
        assert all(d * math.sin(angle) >= line for d in apart), (apart, line)
    else:
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), names


def test_bar_chart_keeps_short_names_level():
    ax = dx.bar_chart({"eager": 1.0, "compiled": 2.0})
    assert all(t.get_rotation() == 0 for t in ax.get_xticklabels())


def test_slide_style_draws_inline_in_a_kernel_whatever_mplbackend_says(monkeypatch):
    # MPLBACKEND=Agg (headless runners) would leave a notebook without figures.
    import IPython
    calls = []

    class Kernel:
        kernel = object()

        def run_line_magic(self, name, arg):
            calls.append((name, arg))

    monkeypatch.setattr(IPython, "get_ipython", lambda: Kernel())
    old = dx.use_slide_style()
    plt.rcParams.update(old)
    assert calls == [("matplotlib", "inline")]
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)   # plain Python: nothing to switch
    plt.rcParams.update(dx.use_slide_style())
    assert calls == [("matplotlib", "inline")]
