"""Models of compute: t = max(overhead, bytes / bandwidth, flops / peak), the roofline, regimes."""
import pytest

import d2l_extras as dx
from d2l_extras import perfmodel as pm

US, GB = 1e-6, 1e9
# A made-up machine: 5 us per call, 20 GB/s, 100 GFLOP/s (ridge at 5 FLOP per byte).
MODEL = dx.perfmodel.PerformanceModel(overhead_s=5 * US, bandwidth=20 * GB, peak=100 * GB)


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
    assert list(dx.perfmodel.REGIMES) == ["overhead", "memory", "compute"]
    assert set(dx.perfmodel.REGIMES.values()) == {"overhead-bound", "memory-bound", "compute-bound"}


@pytest.mark.parametrize("kwargs", [
    {"overhead_s": 0, "bandwidth": GB, "peak": GB},
    {"overhead_s": US, "bandwidth": -1, "peak": GB},
    {"overhead_s": US, "bandwidth": GB, "peak": float("inf")},
    {"overhead_s": US, "bandwidth": "20 GB/s", "peak": GB},
])
def test_a_machine_needs_three_positive_numbers(kwargs):
    with pytest.raises(ValueError, match="PerformanceModel"):
        dx.perfmodel.PerformanceModel(**kwargs)


@pytest.mark.parametrize("flops, n_bytes", [(-1, 8), (8, -1), (True, 8), (8, None),
                                             (float("nan"), 8)])
def test_work_is_a_number_at_least_zero(flops, n_bytes):
    with pytest.raises(ValueError, match=">= 0"):
        MODEL.time(flops, n_bytes)


# ---------------------------------------------------------------- the roofline

def test_roof_and_violations():
    roof = pm.Roof(10.0, 100.0)
    assert roof.ridge == 10 and roof.attainable(1.0) == 10 and roof.attainable(50) == 100
    inside = pm.Kernel("add", 1.0, 12.0, 1.0 / 0.8e9)       # 0.8 GFLOP/s at I = 1/12: roof 0.83
    above = pm.Kernel("mm", 2e6, 1.2e4, 2e6 / 120e9)         # 120 GFLOP/s under a 100 peak
    assert pm.roof_violations([inside], roof) == []
    assert pm.roof_violations([inside, above], roof, 0.1) == ["mm: 120 GFLOP/s > roof 100"]
    assert pm.roof_violations([above], roof, 0.25) == []
    with pytest.raises(ValueError, match="fraction"):
        pm.roof_violations([above], roof, 1.5)


def test_roof_violations_let_a_cache_serve_only_what_it_holds():
    sheet = pm.Roof(100.0, 1000.0)                    # a data sheet: 100 GB/s, 1000 GFLOP/s
    add = pm.Kernel("add", 1e9 / 12, 1e9, 1e9 / 200e9)  # moves 1 GB per call at 200 GB/s
    assert pm.roof_violations([add], sheet, 0.05) == ["add: 16.7 GFLOP/s > roof 8.33"]
    # a 0.4 GB cache may serve 0.4 GB; 0.6 GB still cross the bus at <= 100 GB/s: 167 GB/s
    assert pm.roof_violations([add], sheet, 0.05, cache_bytes=0.4e9) == \
        ["add: 16.7 GFLOP/s > roof 13.9"]
    assert pm.roof_violations([add], sheet, 0.05, cache_bytes=0.6e9) == []   # 250 GB/s allowed
    # all of it fits in the cache: only the flat roof holds, and still catches a wrong count
    fast = pm.Kernel("add", 1e9 / 12, 1e9, 1e9 / 12 / 2000e9)
    assert pm.roof_violations([fast], sheet, 0.05, cache_bytes=2e9) == \
        ["add: 2e+03 GFLOP/s > roof 1e+03"]
    with pytest.raises(ValueError, match="cache_bytes"):
        pm.roof_violations([add], sheet, cache_bytes=-1)


def test_attainable():
    assert pm.attainable(0.1, 10, 100) == pytest.approx(1.0)
    assert pm.Roof(10, 100).attainable(100) == 100
    for args in ((0, 10, 100), (1, 0, 100), (1, 10, -1)):
        with pytest.raises(ValueError, match="needs intensity, bandwidth and peak > 0"):
            pm.attainable(*args)


# ---------------------------------------------------------------- the memory regime

MB = 10 ** 6


@pytest.mark.parametrize("operand, cache, regime", [
    (268 * MB, 50 * MB, "memory"),     # H100, class size: far beyond L2
    (16 * MB, 50 * MB, "cache"),       # H100, ci size: input, temporary and result fit in L2
    (20 * MB, 50 * MB, "mixed"),       # one fits, three do not
    (16 * MB, 32 * 2 ** 20, "mixed"),  # 16 MB on a laptop CPU with a 32 MiB L3
    (16 * MB, 480 * 2 ** 20, "cache"),
    (16 * MB, None, "unknown")])
def test_memory_regime(operand, cache, regime):
    assert dx.perfmodel.memory_regime(operand, cache) == regime


def test_memory_regime_live_operands():
    assert dx.perfmodel.memory_regime(20 * MB, 50 * MB, live=2) == "cache"


@pytest.mark.parametrize("kwargs", [dict(operand_bytes=0, cache_bytes=1),
                                    dict(operand_bytes=1.5, cache_bytes=1),
                                    dict(operand_bytes=1, cache_bytes=0),
                                    dict(operand_bytes=1, cache_bytes="50MB"),
                                    dict(operand_bytes=1, cache_bytes=1, live=0)])
def test_memory_regime_refuses_bad_sizes(kwargs):
    with pytest.raises(ValueError, match="whole number"):
        dx.perfmodel.memory_regime(**kwargs)
