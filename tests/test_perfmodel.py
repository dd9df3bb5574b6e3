"""The performance model t = max(overhead, bytes / bandwidth, flops / peak) and its regimes."""
import pytest

import d2l_extras as dx

US, GB = 1e-6, 1e9
# A made-up machine: 5 us per call, 20 GB/s, 100 GFLOP/s (ridge at 5 FLOP per byte).
MODEL = dx.PerformanceModel(overhead_s=5 * US, bandwidth=20 * GB, peak=100 * GB)


def test_each_term_is_its_limit_alone():
    terms = MODEL.terms(flops=2e9, n_bytes=4e8)
    assert terms == pytest.approx({"overhead": 5e-6, "memory": 0.02, "compute": 0.02})


@pytest.mark.parametrize("flops, n_bytes, regime, seconds", [
    (8, 64, "overhead-bound", 5e-6),               # a tiny op: only the call costs
    (2 ** 25, 8 * 2 ** 25, "memory-bound", 0.0134217728),   # x + x on 2**25 floats
    (2 * 1024 ** 3, 12 * 1024 ** 2, "compute-bound", 0.0214748365),  # 1024 x 1024 product
])
def test_the_largest_term_names_the_regime_and_the_time(flops, n_bytes, regime, seconds):
    assert MODEL.regime(flops, n_bytes) == regime
    assert MODEL.time(flops, n_bytes) == pytest.approx(seconds)


def test_no_work_still_pays_the_overhead():
    assert MODEL.time(0, 0) == MODEL.overhead_s and MODEL.regime(0, 0) == "overhead-bound"


def test_regime_names_are_the_chapter_words():
    assert list(dx.REGIMES) == ["overhead", "memory", "compute"]
    assert set(dx.REGIMES.values()) == {"overhead-bound", "memory-bound", "compute-bound"}


@pytest.mark.parametrize("kwargs", [
    {"overhead_s": 0, "bandwidth": GB, "peak": GB},
    {"overhead_s": US, "bandwidth": -1, "peak": GB},
    {"overhead_s": US, "bandwidth": GB, "peak": float("inf")},
    {"overhead_s": US, "bandwidth": "20 GB/s", "peak": GB},
])
def test_a_machine_needs_three_positive_numbers(kwargs):
    with pytest.raises(ValueError, match="PerformanceModel"):
        dx.PerformanceModel(**kwargs)


@pytest.mark.parametrize("flops, n_bytes", [(-1, 8), (8, -1), (True, 8), (8, None),
                                             (float("nan"), 8)])
def test_work_is_a_number_at_least_zero(flops, n_bytes):
    with pytest.raises(ValueError, match=">= 0"):
        MODEL.time(flops, n_bytes)
