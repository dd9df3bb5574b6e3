"""The roofline: its bound at each intensity, and kernels measured above it."""
import pytest

from d2l_extras import perfmodel as pm


def test_roof_and_violations():
    roof = pm.Roof(10.0, 100.0)
    assert roof.ridge == 10 and roof.attainable(1.0) == 10 and roof.attainable(50) == 100
    inside = pm.Kernel("add", 1.0, 12.0, 1.0 / 0.8e9)       # 0.8 GFLOP/s at I = 1/12: roof 0.83
    above = pm.Kernel("mm", 2e6, 1.2e4, 2e6 / 120e9)         # 120 GFLOP/s under a 100 peak
    assert pm.roof_violations([inside], roof) == []
    assert pm.roof_violations([inside, above], roof, 0.1) == ["mm: 120 GFLOP/s > roof 100"]
    assert pm.roof_violations([above], roof, 0.25) == []


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


def test_a_kernel_reads_its_rates_and_their_band():
    k = pm.Kernel("add", 1e9, 12e9, 0.5, time=pm.Band(0.5, 0.4, 1.0))
    assert (k.intensity, k.gflops, k.gbps) == (pytest.approx(1 / 12), 2.0, 24.0)
    assert (k.gflops_band.low, k.gflops_band.high) == (1.0, 2.5)
    assert pm.Kernel("add", 1e9, 12e9, 0.5).gflops_band == pm.Band(2.0, 2.0, 2.0)


# ---------------------------------------------------------------- the memory regime

MB = 10 ** 6


