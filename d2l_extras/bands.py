"""Readings that know their noise: a value with its band, a comparison, a prediction checked."""
import math
import operator
import statistics
from dataclasses import dataclass
from functools import partialmethod
from typing import Callable, Iterable, NamedTuple

NOISE_FLOOR = 0.10   # run-to-run drift (clock speed, other programs) that no single run shows


@dataclass(frozen=True)
class Band:
    """A value and the range it was measured in: low <= value <= high."""

    value: float
    low: float
    high: float

    @classmethod
    def of(cls, samples: Iterable[float]) -> "Band":
        """The median of the samples and their interquartile range (one sample: no range)."""
        xs = [float(x) for x in samples]
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

    def widen(self, tolerance: float) -> "Band":
        """The band stretched by a factor of 1 + tolerance on both sides (0.25: 1.25x each way)."""
        # A positive low end is divided by the factor: "within 25%" means the same either way.
        t = tolerance
        low = self.low / (1 + t) if self.low > 0 else self.low - t * abs(self.low)
        high = self.high * (1 + t) if self.high > 0 else self.high + t * abs(self.high)
        return Band(self.value, low, high)

    def _arith(self, other: "Band | float", op: Callable, swap: bool = False) -> "Band":
        # Interval arithmetic: the result's band holds every outcome of the operands' bands.
        a, b = (_band(other), self) if swap else (self, _band(other))
        if op is operator.truediv and b.low <= 0 <= b.high:   # no bound holds every quotient
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
    return band if isinstance(band, Band) else Band.exact(float(band))


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
    speedup = _band(old) / _band(new)
    band = speedup.widen(floor)
    verdict = "faster" if band.low > 1 else "slower" if band.high < 1 else "within noise"
    return Comparison(speedup, band, verdict)


class Prediction(NamedTuple):
    """The measured band, whether it holds the prediction, and in words."""

    measured: Band
    ok: bool
    words: str

    def __str__(self) -> str:
        return self.words


def check_prediction(predicted: float, measured: "Band | float", tolerance: float) -> Prediction:
    """Is `predicted` inside the measured band, widened by `tolerance` (the model's error)?"""
    # measured / predicted with the model's error: as predicted when the band holds 1.
    c = compare(predicted, measured, tolerance)
    verdict = {"faster": "above the prediction", "slower": "below the prediction"}.get(
        c.verdict, "as predicted")
    b = c.band
    words = f"{c.speedup.value:.2f}x the prediction ({b.low:.2f}-{b.high:.2f}x): {verdict}"
    return Prediction(_band(measured), c.verdict == "within noise", words)
