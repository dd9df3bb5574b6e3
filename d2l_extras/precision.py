"""Number formats of deep learning (float32 to fp8): their bits, range and precision, measured."""
import math
from typing import Iterable, NamedTuple, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Patch

from .plotting import MIN_POINTS, _text_pixels


class FloatFormat(NamedTuple):
    """A binary floating-point format: 1 sign bit, `exponent` bits, `mantissa` stored bits."""
    name: str
    exponent: int
    mantissa: int
    dtype: torch.dtype | None  # None for tf32: a way tensor cores compute, not a storage dtype
    finite_only: bool = False  # no infinities: the top exponent holds numbers (fp8 e4m3fn)
    bits = property(lambda self: 1 + self.exponent + self.mantissa,
                    doc="Bits per number: sign, exponent and mantissa (tf32: 19, stored in 32).")


FLOAT_FORMATS: dict[str, FloatFormat] = {f.name: f for f in (
    FloatFormat("float32", 8, 23, torch.float32),
    FloatFormat("tf32", 8, 10, None),
    FloatFormat("bfloat16", 8, 7, torch.bfloat16),  # mixed precision, float32's range
    FloatFormat("float16", 5, 10, torch.float16),  # mixed precision with loss scaling
    FloatFormat("float8_e4m3fn", 4, 3, torch.float8_e4m3fn, finite_only=True),  # forward
    FloatFormat("float8_e5m2", 5, 2, torch.float8_e5m2),  # gradients of fp8 training
)}


def _as_format(fmt: FloatFormat | str) -> FloatFormat:
    if isinstance(fmt, FloatFormat) or isinstance(fmt, str) and fmt in FLOAT_FORMATS:
        return FLOAT_FORMATS[fmt] if isinstance(fmt, str) else fmt
    raise ValueError(f"unknown format {fmt!r}: pass a FloatFormat or one of {list(FLOAT_FORMATS)}")


def format_limits(fmt: FloatFormat | str) -> dict[str, float]:
    """Step above 1, largest finite, smallest normal and subnormal, digits: from the bits alone."""
    fmt = _as_format(fmt)
    e, m, finite = fmt.exponent, fmt.mantissa, int(fmt.finite_only)
    bias = 2 ** (e - 1) - 1
    # IEEE keeps the top exponent for inf and NaN; a finite-only format keeps only 1.11...1 (NaN).
    largest = (2 - 2.0 ** (finite - m)) * 2.0 ** (2 ** e - 2 + finite - bias)
    return {"eps": 2.0 ** -m, "max": largest, "smallest_normal": 2.0 ** (1 - bias),
            "smallest_subnormal": 2.0 ** (1 - bias - m), "decimal_digits": (m + 1) * math.log10(2)}


def _round_trip(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return values.to(dtype).to(torch.float64)


def measure_format(dtype: torch.dtype) -> dict[str, float]:
    """Measure a dtype's limits by casting float64 values into it and back (no torch.finfo)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"measure_format() needs a floating-point torch.dtype, got {dtype!r}")
    if dtype.itemsize >= 8:
        raise ValueError(f"measure_format() measures in float64: pass a narrower dtype than "
                         f"{dtype}")
    try:  # packed dtypes (float4_e2m1fn_x2) have no cast; float8_e8m0fnu has no zero
        zero = _round_trip(torch.zeros(1, dtype=torch.float64), dtype).item()
    except (NotImplementedError, RuntimeError) as err:
        raise TypeError(f"torch cannot cast float64 into {dtype} ({err}): measure another "
                        "dtype, such as torch.float16") from err
    if zero != 0:
        raise ValueError(f"{dtype} has no zero (0 comes back as {zero}): measure another dtype")
    # Every power of two float64 holds, cast at once; what an overflow gives (inf, NaN, or 448
    # for e4m3fn since torch 2.14, which saturates) never equals the value: not exact.
    powers = 2.0 ** torch.arange(-1074, 1024, dtype=torch.float64)
    back = _round_trip(powers, dtype)
    exact = back == powers
    eps = powers[_round_trip(1 + powers, dtype) != 1].min().item()  # smallest h: 1 + h > 1
    # The largest number is the largest exact power of two times 1.1...1 in binary.
    ones = powers[exact].max() * (2 - powers[powers <= 1])
    largest = ones[_round_trip(ones, dtype) == ones].max().item()
    # Below the smallest normal x the spacing stays the smallest subnormal, more than x * eps:
    # the smallest normal is the smallest power of two whose next number is x * (1 + eps).
    step_up = powers * (1 + eps)
    normal = (_round_trip(step_up, dtype) == step_up) & (step_up > powers)
    return {"eps": eps, "max": largest, "smallest_normal": powers[normal].min().item(),
            "smallest_subnormal": powers[exact].min().item(),
            "underflows_to_zero": powers[back == 0].max().item()}


def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Round float32 values to `bits` mantissa bits, to nearest even (bits=10: TF32, 7: bf16)."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError(f"round_mantissa() rounds float32: pass x.float(), got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    if isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= 23:
        raise ValueError(f"bits is a whole number of mantissa bits from 0 to 23, got {bits!r}")
    if (drop := 23 - bits) == 0:
        return x.clone()
    raw = x.view(torch.int32)
    magnitude = raw & 0x7FFFFFFF  # rounding the magnitude's bit pattern rounds the number
    # Add just under half of the dropped part, plus 1 if the kept part is odd: a tie then rounds
    # up only from odd, that is to even. A carry runs into the exponent, as it should (to inf).
    lowest_kept = (magnitude >> drop) & 1
    rounded = (magnitude + (1 << (drop - 1)) - 1 + lowest_kept) & -(1 << drop)
    out = (rounded | (raw & -(1 << 31))).view(torch.float32)  # sign back
    return torch.where(torch.isfinite(x), out, x)  # a NaN's payload could round to inf


def plot_formats(formats: Iterable[FloatFormat | str] | None = None,
                 ax: Sequence[plt.Axes] | None = None) -> tuple[plt.Axes, plt.Axes]:
    """Draw each format's bit layout (left) and its range on a log2 axis (right), one row each."""
    fmts = [_as_format(f) for f in (FLOAT_FORMATS.values() if formats is None else formats)]
    if not fmts:
        raise ValueError("plot_formats() needs at least one format, e.g. ['float32', 'bfloat16']")
    if ax is None:  # 9.4 in: a slide shows 960 px, and a wider picture is shrunk below 12 pt
        _, ax = plt.subplots(1, 2, figsize=(9.4, 3.8), sharey=True, layout="constrained")
    try:
        left, right = ax
    except (TypeError, ValueError):
        raise ValueError("plot_formats() draws two panels: pass ax=(bits_axes, range_axes), "
                         "e.g. plt.subplots(1, 2)[1], or no ax") from None
    right.set_xscale("log", base=2)
    colors = {"sign": "C3", "exponent": "C0", "mantissa": "C2"}
    rows = [(len(fmts) - 1 - i, f, format_limits(f)) for i, f in enumerate(fmts)]  # widest on top
    for row, f, lim in rows:
        kinds = ["sign"] + ["exponent"] * f.exponent + ["mantissa"] * f.mantissa
        left.barh([row] * f.bits, 1, left=range(f.bits), height=0.7, edgecolor="white",
                  color=[colors[k] for k in kinds])
        left.text(f.bits + 0.5, row, str(f.bits), va="center", fontsize=MIN_POINTS)
        # the range comes from the exponent bits: its colour; subnormals pale (fewer bits)
        low, normal, top = lim["smallest_subnormal"], lim["smallest_normal"], lim["max"]
        right.barh(row, normal - low, left=low, height=0.7, color=colors["exponent"], alpha=0.35)
        right.barh(row, top - normal, left=normal, height=0.7, color=colors["exponent"])
    widest = max(f.bits for f in fmts)  # ticks at whole bytes, all inside the axes
    left.set(yticks=range(len(fmts)), yticklabels=[f.name for f in fmts][::-1],
             xticks=range(0, widest + 1, 8), xlim=(0, 1.15 * widest), xlabel="bits")
    # Limits by hand: autoscaling stops at the bars' sticky edges (matplotlib 3.11 cut float32's
    # range at 2^-6). A few ticks at 2**(k * stride), stride a power of two: 2^-128, 2^-64, 2^0.
    lo = math.floor(math.log2(min(lim["smallest_subnormal"] for *_, lim in rows))) - 4
    hi = math.ceil(math.log2(max(lim["max"] for *_, lim in rows))) + 4
    stride = 2 ** max(1, round(math.log2((hi - lo) / 5)))
    right.set(xlim=(2.0 ** lo, 2.0 ** hi), xlabel="magnitude, log scale (pale: subnormal)",
              xticks=[2.0 ** k for k in range(math.ceil(lo / stride) * stride, hi + 1, stride)])
    right.minorticks_off()
    left.figure.legend(handles=[Patch(color=c, label=k) for k, c in colors.items()],
                       loc="outside upper center", ncols=3, frameon=False, fontsize=MIN_POINTS)
    left.figure.canvas.draw()  # the layout is final: measure the room right of each bar
    for row, f, lim in rows:  # eps right of the bar where it fits, else inside it (white)
        room = right.bbox.x1 - right.transData.transform((lim["max"], row))[0]
        outside = room > _text_pixels("eps 2-23", right.figure.dpi)
        x = lim["max"] * 4 if outside else math.sqrt(lim["smallest_normal"] * lim["max"])
        right.text(x, row, f"eps $2^{{-{f.mantissa}}}$", va="center", fontsize=MIN_POINTS,
                   ha="left" if outside else "center", color="black" if outside else "white")
    return left, right
