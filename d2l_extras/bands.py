"""Readings that know their noise: a value with its band, a comparison, a prediction checked."""
import math
import numbers
import operator
import statistics
from dataclasses import dataclass
from functools import partialmethod
from typing import Callable, Iterable, NamedTuple

from .checks import non_negative_number, positive_number

NOISE_FLOOR = 0.10   # run-to-run drift (clock speed, other programs) that no single run shows


def _finite(x: object, what: str, fraction: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
        raise ValueError(f"{what} must be a finite number, got {x!r}")
    if fraction and not 0 <= x < 1:
        raise ValueError(f"{what} is a fraction in [0, 1), got {x}")
    return float(x)


@dataclass(frozen=True)
class Band:
    """A value and the range it was measured in: low <= value <= high."""

    value: float
    low: float
    high: float

    def __post_init__(self) -> None:
        for name in ("value", "low", "high"):
            _finite(getattr(self, name), f"Band: {name}")
        if not self.low <= self.value <= self.high:
            raise ValueError(f"Band needs low <= value <= high, got {self.low!r}, "
                             f"{self.value!r}, {self.high!r}")

    @classmethod
    def of(cls, samples: Iterable[float]) -> "Band":
        """The median of the samples and their interquartile range (one sample: no range)."""
        xs = [_finite(x, "each sample") for x in samples]
        if not xs:
            raise ValueError("Band.of() needs at least one sample")
        if len(xs) == 1:
            return cls.exact(xs[0])
        q1, median, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        return cls(median, q1, q3)

    @classmethod
    def exact(cls, value: float) -> "Band":
        """A number known exactly (a count, a published figure): a band of zero width."""
        return cls(value, value, value)

    spread = property(lambda self: (self.high - self.low) / 2 / abs(self.value)
                      if self.value else math.inf,
                      doc="Half the band's width relative to the value (0.03: about +-3%).")
    pm = property(lambda self: f"±{self.spread:.0%}" if self.spread >= 0.005 else "±<1%",
                  doc="The spread as text: '±3%', or '±<1%' below half a percent.")

    def contains(self, x: float) -> bool:
        """Whether x lies inside the band."""
        return self.low <= _finite(x, "contains(): x") <= self.high

    def widen(self, tolerance: float) -> "Band":
        """The band stretched by a factor of 1 + tolerance on both sides (0.25: 1.25x each way)."""
        # A positive low end is divided by the factor: "within 25%" means the same either way.
        t = non_negative_number(tolerance, "widen(): tolerance")
        low = self.low / (1 + t) if self.low > 0 else self.low - t * abs(self.low)
        high = self.high * (1 + t) if self.high > 0 else self.high + t * abs(self.high)
        return Band(self.value, low, high)

    def _arith(self, other: "Band | float", op: Callable, swap: bool = False) -> "Band":
        # Interval arithmetic: the result's band holds every outcome of the operands' bands.
        a, b = (_band(other), self) if swap else (self, _band(other))
        if op is operator.truediv and b.low <= 0 <= b.high:
            raise ValueError(f"cannot divide by a band that holds zero: {b}")
        corners = [op(x, y) for x in (a.low, a.high) for y in (b.low, b.high)]
        return Band(op(a.value, b.value), min(corners), max(corners))

    __add__ = __radd__ = partialmethod(_arith, op=operator.add)
    __mul__ = __rmul__ = partialmethod(_arith, op=operator.mul)
    __sub__ = partialmethod(_arith, op=operator.sub)
    __rsub__ = partialmethod(_arith, op=operator.sub, swap=True)
    __truediv__ = partialmethod(_arith, op=operator.truediv)
    __rtruediv__ = partialmethod(_arith, op=operator.truediv, swap=True)

    def __float__(self) -> float:
        return self.value

    def __str__(self) -> str:
        return f"{self.value:.3g} ({self.low:.3g}-{self.high:.3g})"


def _band(x: "Band | float") -> Band:
    # A plain number is a band of zero width; a Measurement (timing.py) has a .band.
    band = getattr(x, "band", x)
    return band if isinstance(band, Band) else Band.exact(_finite(x, "a band or a number"))


class Comparison(NamedTuple):
    """How many times as fast `new` is as `old`, that band widened by the noise floor, a verdict."""

    speedup: Band
    band: Band
    verdict: str    # "faster", "slower" or "within noise" (the widened band holds 1)

    def __str__(self) -> str:
        b = self.band
        return f"{self.speedup.value:.2f}x ({b.low:.2f}-{b.high:.2f}x): {self.verdict}"


def compare(new: "Band | float", old: "Band | float", floor: float = NOISE_FLOOR) -> Comparison:
    """Compare two times (Measurements or Bands of seconds): is `new` faster than `old`?"""
    floor = _finite(floor, "compare(): floor", fraction=True)
    new, old = _band(new), _band(old)
    if new.low <= 0 or old.low <= 0:
        raise ValueError(f"compare() needs times > 0, got {new} and {old}")
    band = (old / new).widen(floor)
    verdict = "faster" if band.low > 1 else "slower" if band.high < 1 else "within noise"
    return Comparison(old / new, band, verdict)


class Prediction(NamedTuple):
    """A prediction, the measured band, whether it holds, measured / predicted, and in words."""

    predicted: float
    measured: Band
    ok: bool
    ratio: float    # above 1, the model promised too little
    words: str

    def __str__(self) -> str:
        return self.words


def check_prediction(predicted: float, measured: "Band | float", tolerance: float) -> Prediction:
    """Is `predicted` inside the measured band, widened by `tolerance` (the model's error)?"""
    predicted = positive_number(predicted, "check_prediction(): predicted")
    measured = _band(measured)
    tolerance = _finite(tolerance, "check_prediction(): tolerance", fraction=True)
    allowed = measured.widen(tolerance) / predicted   # measured / predicted, with the model's error
    ok, ratio = allowed.contains(1.0), measured.value / predicted
    verdict = "as predicted" if ok else "below the prediction" if ratio < 1 else "above the prediction"
    # The rule a student can check by hand: as predicted when the band holds 1.
    words = f"{ratio:.2f}x the prediction ({allowed.low:.2f}-{allowed.high:.2f}x): {verdict}"
    return Prediction(predicted, measured, ok, ratio, words)


def errorbars(values: Iterable["Band | float"], scale: float = 1.0) -> list[list[float]]:
    """Matplotlib's `yerr` for bands (and Measurements): each median's distance to either end."""
    scale = positive_number(scale, "errorbars(): scale (1e3 for seconds drawn in ms)")
    bands = [_band(v) for v in values]
    return [[(b.value - b.low) * scale for b in bands],
            [(b.high - b.value) * scale for b in bands]]
