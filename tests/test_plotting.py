import matplotlib.pyplot as plt
import pytest

import d2l_extras as dx


def test_bar_chart_from_mapping():
    ax = dx.bar_chart({"eager": 2e-3, "compiled": 1e-3}, title="t")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["eager", "compiled"]
    assert [round(p.get_height(), 6) for p in ax.patches] == [2e-3, 1e-3]
    assert ax.get_title() == "t"
    plt.close("all")


def test_bar_chart_from_measurements_uses_median():
    m = dx.Measurement("x", cold=1.0, warm=[3.0, 1.0, 2.0])
    ax = dx.bar_chart([m], log=True)
    assert ax.patches[0].get_height() == 2.0 and ax.get_yscale() == "log"
    plt.close("all")


def test_bar_chart_needs_values():
    with pytest.raises(ValueError, match="at least one value"):
        dx.bar_chart({})


def test_log_axis_adds_room_and_plain_ticks():
    _, ax = plt.subplots()
    ax.plot([1, 10, 100], [1, 10, 1000])
    ax.set_yscale("log")
    top = ax.get_ylim()[1]
    dx.log_axis(ax)
    assert ax.get_ylim()[1] == pytest.approx(top * 2.5)
    assert ax.yaxis.get_major_formatter()(100, 0) == "100"
    plt.close("all")


def test_log_axis_needs_a_log_axis():
    _, ax = plt.subplots()
    with pytest.raises(ValueError, match="set_yscale"):
        dx.log_axis(ax)
    plt.close("all")


def test_bar_chart_labels_seconds_with_units():
    ax = dx.bar_chart({"a": 2.5e-5, "b": 3e-5})
    assert ax.yaxis.get_major_formatter()(2e-5, 0) == "20 us"
    plt.close("all")
