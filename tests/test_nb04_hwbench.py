"""Notebook 04 writes copy_rate, gather_times, axpy_times, matmul_gflops and random_read_times
itself: each counts the same bytes, FLOPs and elements as its tested twin in d2l_extras.hwbench
(issue 16: such checks leave the lesson). Both run on a fake clock, dx.TickClock(), which
advances one second at every read: every timed stretch then "lasts" exactly one second, so a
rate is exactly what was counted, whatever the load on the machine."""
import json

import pytest

import d2l_extras as dx
from nbcells import notebook_namespace, notebook_path

MiB = 2 ** 20
NAMES = ["copy_rate", "gather_times", "axpy_times", "matmul_gflops", "random_read_times"]


@pytest.fixture(scope="module")
def nb():
    return notebook_namespace("04", NAMES)


@pytest.mark.parametrize("n_bytes", [4096, MiB])
def test_copy_rate_counts_like_dx(nb, n_bytes):
    ours = nb["copy_rate"](n_bytes, clock=dx.TickClock())
    ref = dx.copy_bandwidth(n_bytes, "cpu", clock=dx.TickClock())
    assert ours == ref.giga, "copy_rate counts other bytes than dx.copy_bandwidth"


def test_gather_times_counts_like_dx(nb):
    ours = nb["gather_times"](4096, MiB, clock=dx.TickClock())
    ref = dx.gather_time(4096, MiB, "cpu", clock=dx.TickClock())
    assert ours == [ref.random_s, ref.contiguous_s], "gather_times counts other elements"


def test_axpy_times_counts_like_dx(nb):
    ours = nb["axpy_times"](1000, clock=dx.TickClock())
    ref = dx.loop_vs_vectorized(1000, clock=dx.TickClock())
    assert ours == (ref.loop_s, ref.vector_s)


@pytest.mark.parametrize("n", [16, 64])
def test_matmul_gflops_counts_like_dx(nb, n):
    ours = nb["matmul_gflops"](n, clock=dx.TickClock())
    ref = dx.matmul_rate(n, "float32", "cpu", repeats=3, clock=dx.TickClock())
    assert ours == ref.giga


def test_random_read_times_counts_like_dx(nb):
    sizes = [4096, MiB]
    ours = nb["random_read_times"](sizes, 1024, clock=dx.TickClock())
    assert ours == dx.cache_sweep(sizes, 1024, clock=dx.TickClock()).seconds


def test_twin_checks_left_the_lesson():
    cells = json.loads(notebook_path("04").read_text(encoding="utf-8"))["cells"]
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "TickClock" not in code, "fake-clock twin checks belong in this test file"
