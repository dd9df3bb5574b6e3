"""The communication cost model reproduces the book's numbers (d2l 12.7)."""
import pytest

from d2l_extras import communication as cm

MB, GB = 1e6, 1e9


def test_book_estimate_for_8_v100s_is_about_6_ms():
    # The book (12.7.2) publishes "approximately 6 ms" for two rings of 2 x 18 and 18 GB/s,
    # which act as one ring of their summed bandwidth.
    approx = cm.ring_time(160 * MB, 8, 36 * GB + 18 * GB, approximate=True)
    assert abs(approx * 1e3 - 6) < 0.5
    # Without the book's rounding, each link carries 2 (n-1)/n = 7/4 of the data, not 2.
    exact = cm.ring_time(160 * MB, 8, 36 * GB + 18 * GB)
    assert exact == pytest.approx(approx * 7 / 8)


def test_data_sheet_nvlink_gives_a_faster_v100_ring():
    # NVLink 2 carries 25 GB/s per link and direction (V100 data sheet: 6 links, 300 GB/s).
    assert cm.ring_time(160 * MB, 8, 50 * GB + 25 * GB) * 1e3 == pytest.approx(3.733, abs=1e-3)


def test_one_node_needs_no_traffic():
    assert cm.ring_time(1.0, 1, 1.0) == 0


@pytest.mark.parametrize("call, match", [
    (lambda: cm.ring_time(1, 0, 1), "n \\(number of nodes\\)"),
    (lambda: cm.ring_time(-1, 2, 1), "size"),
    (lambda: cm.ring_time(1, 2, -1), "bandwidth"),
    (lambda: cm.ring_time(1, 2, float("inf")), "bandwidth"),
    (lambda: cm.ring_time(1, 2, [18e9, 9e9]), "bandwidth"),  # two rings: pass their sum
])
def test_bad_input_says_what_is_valid(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# The scaling model of data parallelism: t_step(k) = t_compute(B/k) + 2 (k-1)/k N / beta.
def test_a_step_adds_the_ring_term_to_compute():
    # 100 MB of gradients at 10 GB/s on 4 devices: 2 * 3/4 * 10 ms = 15 ms after 20 ms.
    assert cm.speedup(4, 0.080, 100 * MB, 10 * GB) == pytest.approx(0.080 / 0.035)
    assert cm.speedup(1, 0.020, 100 * MB, 10 * GB) == 1  # no allreduce alone


def test_strong_scaling_without_communication_is_linear():
    assert cm.speedup(8, 1.0, 1.0, 1e30) == pytest.approx(8)


def test_strong_scaling_is_capped_by_communication():
    # 40 ms of compute, 100 MB at 10 GB/s: 2 devices take 20 + 10 ms, 4 take 10 + 15 ms.
    assert cm.speedup(2, 0.040, 100 * MB, 10 * GB) == pytest.approx(0.040 / 0.030)
    assert cm.speedup(4, 0.040, 100 * MB, 10 * GB) == pytest.approx(0.040 / 0.025)
    # The ring term tends to 2 N / beta = 20 ms: never more than 2x, however many devices.
    assert cm.speedup(1024, 0.040, 100 * MB, 10 * GB) < 2


def test_weak_scaling_keeps_the_work_per_device():
    # Each device still computes 40 ms; k of them process k batches per step.
    assert cm.speedup(4, 0.040, 100 * MB, 10 * GB, scaling="weak") == \
        pytest.approx(4 * 0.040 / 0.055)


def test_a_measured_compute_time_replaces_the_linear_guess():
    # An overhead-bound model (LeNet): half the batch still takes 90% of the time.
    got = cm.speedup(2, 0.010, 0.25 * MB, 1 * GB, compute_k=0.009)
    assert got == pytest.approx(0.010 / (0.009 + 0.00025))
    assert got < 1.15


def test_a_slice_timed_below_its_share_predicts_no_more_than_k():
    # Half the batch timed at 40% of the whole (noise, or a cache): the model uses t(B)/2,
    # so that nothing predicts more than 2x on 2 devices without a measured reason.
    assert cm.speedup(2, 0.010, 1.0, 1e30, compute_k=0.004) == pytest.approx(2)
    assert cm.speedup(2, 0.010, 0.25 * MB, 1 * GB, compute_k=0.004) == \
        pytest.approx(0.010 / (0.005 + 0.00025))
    # weak scaling: each device computes a whole batch, in no less than one device's time
    assert cm.speedup(2, 0.010, 1.0, 1e30, "weak", compute_k=0.004) == pytest.approx(2)
    assert cm.speedup(2, 0.010, 1.0, 1e30, "weak", compute_k=0.020) == pytest.approx(1)


@pytest.mark.parametrize("call, match", [
    (lambda: cm.speedup(2, 0.1, MB, GB, compute_k=-1.0), "compute_k"),
    (lambda: cm.speedup(0, 0.1, MB, GB), "number of devices"),
    (lambda: cm.speedup(2, -0.1, MB, GB), "compute_1"),
    (lambda: cm.speedup(2, float("inf"), MB, GB), "compute_1"),
    (lambda: cm.speedup(2, True, MB, GB), "compute_1"),
    (lambda: cm.speedup(2, 0.1, MB, 0), "bandwidth"),
    (lambda: cm.speedup(2, 0.1, MB, GB, scaling="linear"), "strong, weak"),
    (lambda: cm.speedup(2, 0.0, MB, GB), r"compute_1 \(seconds of one device's step\) must be a"),
])
def test_scaling_model_rejects_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
