"""Tests of dx.plot_timeline, drawn from a recorded profiler trace."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import d2l_extras as dx  # noqa: E402
from test_profiling import GPU_TRACE  # noqa: E402


@pytest.fixture(scope="module")
def recorded():
    x = torch.randn(64, 64)

    def work():
        for _ in range(4):
            torch.relu(x @ x)

    return dx.record_timeline(work)


def test_plot_timeline_from_recorded_trace(recorded):
    ax = dx.plot_timeline(recorded, title="matmul then relu")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["CPU thread 0"]
    assert len(ax.collections) == len(recorded)  # one bar per top-level event
    assert ax.get_title() == "matmul then relu"
    assert "time" in ax.get_xlabel()
    plt.close(ax.figure)


def test_plot_timeline_gpu_lanes_cpu_on_top():
    events = dx.trace_events(GPU_TRACE)
    ax = dx.plot_timeline(events)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    # y ticks go bottom-up: the CPU thread is drawn at the top
    assert labels[-1] == "CPU thread 0" and set(labels) == {e.lane for e in events}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert set(legend) == {"cpu op", "kernel", "copy"}
    plt.close(ax.figure)


def test_plot_timeline_color_by_name_and_chosen_lanes(recorded):
    fig, ax = plt.subplots()
    out = dx.plot_timeline(recorded, ax=ax, color_by="name", lanes=["CPU thread 0"])
    assert out is ax
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"aten::matmul", "aten::relu"}
    plt.close(fig)


def test_plot_timeline_bad_input(recorded):
    with pytest.raises(ValueError, match="at least one event"):
        dx.plot_timeline([])
    with pytest.raises(ValueError, match="color_by"):
        dx.plot_timeline(recorded, color_by="colour")
