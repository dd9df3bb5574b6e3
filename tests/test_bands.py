"""Bands, comparisons and predictions, on injected measurements: no timing, no machine."""
import pytest

import d2l_extras as dx
from d2l_extras.bands import Band


def m(*warm, name="m"):
    """A Measurement whose warm runs are given: what a machine of known noise would measure."""
    return dx.timing.Measurement(name, cold=max(warm), warm=list(warm))


def test_band_of_samples_is_median_and_interquartile_range():
    b = Band.of([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (b.value, b.low, b.high) == (3.0, 2.0, 4.0)
    assert b.spread == pytest.approx(1 / 3)
    assert Band.of([7.0]) == Band(7.0, 7.0, 7.0)
    # one wild run moves neither the median nor the quartiles much
    assert Band.of([1.0, 1.0, 1.1, 1.0, 50.0]).value == 1.0


def test_band_arithmetic_holds_every_outcome():
    a, b = Band(10.0, 9.0, 11.0), Band(2.0, 1.0, 4.0)
    assert a / b == Band(5.0, 9.0 / 4.0, 11.0)
    assert a - b == Band(8.0, 5.0, 10.0)
    assert a + 1 == Band(11.0, 10.0, 12.0)
    assert 2 * b == Band(4.0, 2.0, 8.0)
    assert 8 / b == Band(4.0, 2.0, 8.0)
    assert 12 - b == Band(10.0, 8.0, 11.0)
    assert (a / 2).value == 5.0


@pytest.mark.parametrize("call", [lambda: Band(1.0, 1.0, 1.0) / Band(0.0, -1.0, 1.0),
                                  lambda: 1 / Band(0.0, -1.0, 1.0),
                                  lambda: dx.compare(0.0, 1.0)])   # a time of zero
def test_no_band_holds_a_quotient_by_zero(call):
    # Interval arithmetic has no bound for it: the corners would give a band that is wrong.
    with pytest.raises(ValueError, match="holds zero"):
        call()


def test_widen_stretches_both_sides_by_the_same_factor():
    b = Band(10.0, 8.0, 12.0).widen(0.25)
    assert (b.low, b.high) == (6.4, 15.0)
    difference = Band(1.0, -2.0, 4.0).widen(0.5)     # a band that spans zero: by its share
    assert (difference.low, difference.high) == (-3.0, 6.0)


def test_compare_says_faster_only_beyond_the_noise():
    old = m(10.0, 10.2, 9.8, 10.1, 9.9)
    assert dx.compare(m(5.0, 5.1, 4.9, 5.0, 5.0), old).verdict == "faster"
    assert dx.compare(m(20.0, 20.5, 19.5, 20.0, 20.1), old).verdict == "slower"
    # 3% faster with runs that spread by 2%: inside the 5% floor, so no claim
    near = dx.compare(m(9.7, 9.8, 9.6, 9.7, 9.75), old)
    assert near.verdict == "within noise"
    assert near.speedup.value == pytest.approx(10.0 / 9.7)


def test_compare_widens_with_the_spread_of_the_runs():
    # 1.3x faster on the medians, but both spread by +-30%: that is within noise
    noisy_old = m(6.0, 7.0, 8.0, 10.0, 12.0, 13.0, 14.0)     # quartiles 7.5 and 12.5
    noisy_new = m(4.6, 5.4, 6.2, 7.7, 9.2, 10.0, 10.8)       # quartiles 5.8 and 9.6
    assert dx.compare(noisy_new, noisy_old).verdict == "within noise"
    quiet = dx.compare(m(7.7, 7.7, 7.6, 7.8), m(10.0, 10.0, 9.9, 10.1))
    assert quiet.verdict == "faster"
    assert str(quiet).startswith("1.30x (") and str(quiet).endswith(": faster")


def test_compare_takes_bands_and_numbers():
    assert dx.compare(Band(1.0, 0.99, 1.01), 2.0).verdict == "faster"
    assert dx.compare(2.0, 1.0).verdict == "slower"
    assert dx.compare(1.0, 1.0).verdict == "within noise"
    assert dx.compare(1.0, 1.06, floor=0.0).verdict == "faster"


def test_a_prediction_holds_inside_the_widened_band():
    measured = m(1.0, 1.1, 0.9, 1.0, 1.05)   # band 0.95-1.05
    assert dx.check_prediction(1.2, measured, 0.25).ok
    assert dx.check_prediction(1.2, measured, 0.25).measured == measured.band
    # the words show the ratio and the band read: 1.0 / 1.25 / 1.2 to 1.05 * 1.25 / 1.2
    assert dx.check_prediction(1.2, measured, 0.25).words == \
        "0.83x the prediction (0.67-1.09x): as predicted"
    assert not dx.check_prediction(1.4, measured, 0.25).ok
    assert dx.check_prediction(0.5, measured, 0.25).words == \
        "2.00x the prediction (1.60-2.62x): above the prediction"
    assert dx.check_prediction(2.0, measured, 0.25).words == \
        "0.50x the prediction (0.40-0.66x): below the prediction"
    # a noisier measurement admits more: the same prediction is then within its band
    wide = m(0.6, 1.0, 1.5, 1.0, 0.7, 1.4)
    assert dx.check_prediction(1.4, wide, 0.25).ok


