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

    # CPU operators only, even on a GPU machine (no cudaDeviceSynchronize in the trace)
    return dx.record_timeline(work, devices=[torch.device("cpu")])


def test_plot_timeline_from_recorded_trace(recorded):
    ax = dx.plot_timeline(recorded, title="matmul then relu")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["CPU thread 0"]
    assert len(ax.collections) == len(recorded)  # one bar per top-level event
    assert ax.get_title() == "matmul then relu"
    assert "time" in ax.get_xlabel()
    plt.close(ax.figure)


def test_plot_timeline_gpu_lanes_cpu_on_top_then_each_device():
    events = dx.profiling.trace_events(GPU_TRACE)
    ax = dx.plot_timeline(events)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    # y ticks go bottom-up: the CPU thread at the top, then cuda:0's streams (the copy stream
    # starts after cuda:1's kernel, yet stays with its device), then cuda:1
    assert labels[::-1] == ["CPU thread 0", "cuda:0 stream 7", "cuda:0 stream 13",
                            "cuda:1 stream 7"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert set(legend) == {"cpu op", "wait", "kernel", "copy"}
    texts = {t.get_text() for t in ax.texts}
    # Short labels on long bars; a name too long for its bar is left out, never run over.
    assert "Memcpy DtoH" in texts and "compute_and_copy" not in texts
    plt.close(ax.figure)


def test_plot_timeline_labels_never_collide():
    ev = dx.profiling.TimelineEvent
    # Ten back-to-back bars of a tenth each: "matmul" is too long for them at 12 pt.
    events = [ev("matmul", "backend", 0.1 * i, 0.1, "cpu op") for i in range(10)]
    events.append(ev("wait", "frontend", 0.0, 1.0, "wait"))
    ax = dx.plot_timeline(events)
    assert [t.get_text() for t in ax.texts] == ["wait"]
    room = events[:2] + [ev("wait", "frontend", 0.0, 0.2, "wait")]  # bars of half the span
    wide = dx.plot_timeline(room)
    assert sorted(t.get_text() for t in wide.texts) == ["matmul", "matmul", "wait"]
    wide.figure.canvas.draw()
    boxes = [t.get_window_extent() for t in wide.texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    plt.close("all")


def test_plot_timeline_orders_many_devices_by_number():
    ev = dx.profiling.TimelineEvent
    events = [ev("k", f"cuda:{i} stream 7", 0.1 * (10 - i), 0.05, "kernel") for i in range(11)]
    ax = dx.plot_timeline(events + [ev("op", "CPU thread 0", 1.0, 0.1, "cpu op")])
    labels = [t.get_text() for t in ax.get_yticklabels()][::-1]
    assert labels == ["CPU thread 0"] + [f"cuda:{i} stream 7" for i in range(11)]
    plt.close(ax.figure)


def test_plot_timeline_color_by_name_and_chosen_lanes(recorded):
    fig, ax = plt.subplots()
    out = dx.plot_timeline(recorded, ax=ax, color_by="name", lanes=["CPU thread 0"])
    assert out is ax
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"aten::matmul", "aten::relu"}
    plt.close(fig)


def test_plot_timeline_needs_an_event():
    with pytest.raises(ValueError, match="at least one event"):
        dx.plot_timeline([])
