"""Number formats: limits from the bits agree with torch.finfo and with what casting measures."""
import itertools
import math

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

import d2l_extras as dx

STORED = [f for f in dx.precision.FLOAT_FORMATS.values() if f.dtype is not None]
KEYS = ("eps", "max", "smallest_normal", "smallest_subnormal")


def test_formats_widest_first_with_their_bits():
    assert list(dx.precision.FLOAT_FORMATS) == ["float32", "tf32", "bfloat16", "float16",
                                      "float8_e4m3fn", "float8_e5m2"]
    assert [f.bits for f in dx.precision.FLOAT_FORMATS.values()] == [32, 19, 16, 16, 8, 8]
    assert dx.precision.FLOAT_FORMATS["tf32"].dtype is None
    assert [f.name for f in dx.precision.FLOAT_FORMATS.values() if f.finite_only] == ["float8_e4m3fn"]
    for f in STORED:  # the bits fill the dtype's storage exactly
        assert f.dtype.itemsize * 8 == f.bits, f.name
    with pytest.raises(AttributeError):
        dx.precision.FLOAT_FORMATS["float16"].mantissa = 9


def _finfo_limits(dtype: torch.dtype) -> dict:
    fi = torch.finfo(dtype)
    mantissa = round(-math.log2(fi.eps))
    return {"eps": fi.eps, "max": fi.max, "smallest_normal": fi.smallest_normal,
            "smallest_subnormal": 2.0 ** (math.log2(fi.tiny) - mantissa)}


@pytest.mark.parametrize("fmt", STORED, ids=lambda f: f.name)
def test_limits_from_bits_match_finfo(fmt):
    limits = dx.precision.format_limits(fmt)
    assert {k: limits[k] for k in KEYS} == _finfo_limits(fmt.dtype)
    assert dx.precision.format_limits(fmt.name) == limits  # by name too
    if fmt.dtype.itemsize > 1:  # nextafter has no float8 kernel on the CPU
        zero = torch.zeros((), dtype=fmt.dtype)
        assert limits["smallest_subnormal"] == torch.nextafter(zero, zero + 1).item()
    # the decimal digits say how small the rounding error is: 10**-digits is half a step
    assert 10 ** -limits["decimal_digits"] == pytest.approx(limits["eps"] / 2)


def test_tf32_has_float32_range_and_float16_precision():
    tf32, f32 = dx.precision.format_limits("tf32"), dx.precision.format_limits("float32")
    assert tf32["eps"] == 2.0 ** -10 == dx.precision.format_limits("float16")["eps"]
    # float32's largest number, its 13 lowest mantissa bits cleared
    bits = torch.tensor(0x7F7FFFFF & ~(2 ** 13 - 1), dtype=torch.int32)
    assert tf32["max"] == bits.view(torch.float32).item() < f32["max"]
    assert tf32["smallest_normal"] == f32["smallest_normal"] == torch.finfo(torch.float32).tiny


def test_a_wrong_format_does_not_match_finfo():
    wrong = dx.precision.FloatFormat("float16", exponent=5, mantissa=9, dtype=torch.float16)
    assert dx.precision.format_limits(wrong)["eps"] != torch.finfo(torch.float16).eps
    assert dx.precision.format_limits(wrong)["max"] != torch.finfo(torch.float16).max
    # e4m3fn read as an IEEE format (top exponent for inf and NaN) would stop at 240, not 448
    ieee = dx.precision.FLOAT_FORMATS["float8_e4m3fn"]._replace(finite_only=False)
    assert dx.precision.format_limits(ieee)["max"] == 240 != torch.finfo(torch.float8_e4m3fn).max


@pytest.mark.parametrize("fmt", STORED, ids=lambda f: f.name)
def test_measured_limits_match_the_bits(fmt):
    measured, limits = dx.precision.measure_format(fmt.dtype), dx.precision.format_limits(fmt)
    assert {k: measured[k] for k in KEYS} == {k: limits[k] for k in KEYS}
    # ties go to even: half the smallest subnormal rounds to zero, the next power up does not
    assert measured["underflows_to_zero"] == limits["smallest_subnormal"] / 2


def test_measuring_does_not_read_finfo(monkeypatch):
    def no_finfo(*args):
        raise AssertionError("measure_format() read torch.finfo")

    monkeypatch.setattr(torch, "finfo", no_finfo)
    assert dx.precision.measure_format(torch.float8_e4m3fn)["max"] == 448


def test_bad_input_says_what_to_pass():
    with pytest.raises(ValueError, match="float8_e5m2"):
        dx.precision.format_limits("float12")
    with pytest.raises(ValueError, match="unknown format"):
        dx.precision.format_limits(torch.float16)
    for dtype in (torch.int32, torch.bool, torch.complex64, "float16"):
        with pytest.raises(TypeError, match="floating-point torch.dtype"):
            dx.precision.measure_format(dtype)
    with pytest.raises(ValueError, match="narrower dtype"):
        dx.precision.measure_format(torch.float64)
    if hasattr(torch, "float8_e8m0fnu"):  # from torch 2.7 on
        with pytest.raises(ValueError, match="no zero"):
            dx.precision.measure_format(torch.float8_e8m0fnu)


def _all_kinds_of_float32(n: int = 200_000) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    patterns = torch.randint(0, 2 ** 32, (n,), generator=gen) - 2 ** 31  # any bits: NaN, inf too
    subnormal = torch.randint(0, 2 ** 23, (n // 10,), generator=gen)
    # ties (the 16 dropped bits exactly half) and their neighbours, kept part odd and even
    ties = (torch.randint(0, 2 ** 15, (n // 10,), generator=gen) << 16) + 0x8000
    bits = torch.cat([patterns, subnormal, ties, ties + 1, ties - 1, ties + 0x10000])
    signed = torch.cat([bits, bits | -(2 ** 31)])
    return signed.to(torch.int32).view(torch.float32)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    nan = a.isnan()
    return bool(torch.equal(nan, b.isnan()) and
                torch.equal(a[~nan].view(torch.int32), b[~nan].view(torch.int32)))


def test_round_mantissa_to_7_bits_is_bfloat16():
    x = _all_kinds_of_float32()
    assert (x.view(torch.int32) & 0xFFFF == 0x8000).sum() > 10_000  # ties are there
    assert ((x.abs() < torch.finfo(torch.float32).tiny) & (x != 0)).sum() > 10_000  # subnormals
    assert _same_bits(dx.precision.round_mantissa(x, 7), x.to(torch.bfloat16).float())
    assert not _same_bits(dx.precision.round_mantissa(x, 8), x.to(torch.bfloat16).float())


def test_round_mantissa_23_bits_is_the_identity_and_keeps_inf_nan():
    x = _all_kinds_of_float32(10_000)
    assert torch.equal(dx.precision.round_mantissa(x, 23).view(torch.int32), x.view(torch.int32))
    special = torch.tensor([float("inf"), -float("inf"), float("nan")])
    for bits in (0, 10):
        out = dx.precision.round_mantissa(special, bits)
        assert out[:2].tolist() == special[:2].tolist() and out[2].isnan()


def test_round_mantissa_to_10_bits_steps_by_2_to_the_minus_10():
    one = 1.0
    x = torch.tensor([one + 2 ** -10, one + 2 ** -11, one + 3 * 2 ** -12, one + 3 * 2 ** -11,
                      -(one + 2 ** -11)])
    want = [one + 2 ** -10, one, one + 2 ** -10, one + 2 ** -9, -one]
    assert dx.precision.round_mantissa(x, 10).tolist() == want  # ties to even: 1 + 3 * 2**-11 goes up
    # subnormals keep the bits above the dropped 13: tf32's smallest is 2**-136, half goes to 0
    tiny = dx.precision.format_limits("tf32")["smallest_subnormal"]
    assert tiny == 2.0 ** -136
    x = torch.tensor([tiny, tiny / 2, tiny * 3 / 4, tiny * 3 / 2])
    assert dx.precision.round_mantissa(x, 10).tolist() == [tiny, 0, tiny, 2 * tiny]
    h = 1.0  # halve h until 1 + h rounds to 1, as measure_format() does with a dtype
    while dx.precision.round_mantissa(torch.tensor([1 + h]), 10).item() != 1:
        h /= 2
    assert 2 * h == dx.precision.format_limits("tf32")["eps"]
    # float32's largest number rounds up past the largest tf32: to inf, as a bfloat16 cast does
    big = torch.tensor([torch.finfo(torch.float32).max])
    assert dx.precision.round_mantissa(big, 10).isinf().all() and big.to(torch.bfloat16).isinf().all()


def test_round_mantissa_leaves_its_input_and_takes_strided_tensors():
    x = torch.linspace(-3, 3, 101)
    before = x.clone()
    out = dx.precision.round_mantissa(x[::2], 0)
    assert torch.equal(x, before)
    assert torch.equal(out, dx.precision.round_mantissa(x[::2].contiguous(), 0))
    assert all(math.frexp(v)[0] == 0.5 for v in out.abs().tolist() if v)  # 0 bits: 2**k
    assert dx.precision.round_mantissa(torch.tensor([1.4, 2.9, -1.6]), 0).tolist() == [1, 2, -2]


def test_round_mantissa_bad_input():
    for bits in (-1, 24, 2.5, True, "7"):
        with pytest.raises(ValueError, match="0 to 23"):
            dx.precision.round_mantissa(torch.ones(2), bits)
    for x in (torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.bfloat16), [1.0]):
        with pytest.raises(TypeError, match=r"x.float\(\)"):
            dx.precision.round_mantissa(x, 7)


@pytest.fixture
def slide_style():
    old = dx.use_slide_style()
    yield
    plt.rcParams.update(old)
    plt.close("all")


def _texts(fig):
    fig.canvas.draw()
    return [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text()]


@pytest.mark.parametrize("formats", [None, ["float16", "float8_e4m3fn", "float8_e5m2"]])
def test_plot_formats_one_row_per_format_readable_on_a_slide(slide_style, formats):
    left, right = dx.precision.plot_formats(formats)
    names = list(dx.precision.FLOAT_FORMATS) if formats is None else formats
    assert [t.get_text() for t in left.get_yticklabels()] == names[::-1]
    assert len(left.patches) == sum(dx.precision.FLOAT_FORMATS[n].bits for n in names)  # a box a bit
    assert len(right.patches) == 2 * len(names)  # subnormal and normal range
    assert right.get_xscale() == "log"
    low, high = right.get_xlim()
    assert low < min(dx.precision.format_limits(n)["smallest_subnormal"] for n in names)
    assert high > max(dx.precision.format_limits(n)["max"] for n in names)
    eps = [t.get_text() for t in right.texts]
    assert eps == [f"eps $2^{{-{dx.precision.FLOAT_FORMATS[n].mantissa}}}$" for n in names]
    fig = left.figure
    assert fig.get_size_inches()[0] * fig.dpi <= 960  # a slide shows it unshrunk
    texts = _texts(fig)
    small = [(t.get_text(), t.get_fontsize()) for t in texts if t.get_fontsize() < dx.plotting.MIN_POINTS]
    assert not small, small
    boxes = [(t.get_text(), t.get_window_extent()) for t in texts]
    overlaps = [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2)
                if box_a.overlaps(box_b)]
    assert not overlaps, overlaps
    inside = fig.bbox
    assert all(inside.contains(*box.min) and inside.contains(*box.max) for _, box in boxes)


def test_plot_formats_bad_input(slide_style):
    with pytest.raises(ValueError, match="at least one format"):
        dx.precision.plot_formats([])
    with pytest.raises(ValueError, match="float32"):
        dx.precision.plot_formats(["float12"])
    _, ax = plt.subplots()
    with pytest.raises(ValueError, match="two panels"):
        dx.precision.plot_formats(ax=ax)
