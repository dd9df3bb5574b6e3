"""Readings that know their noise: a value with its band, a comparison, a prediction checked.

A measurement is a band, not a number: the median of repeated runs and the interquartile range
around it (`Band.of`). Bands combine by interval arithmetic, so a ratio or a difference of two
measurements carries the band of both. Two verdicts are read off them:

* `compare(new, old)`: how many times as fast `new` is, and "faster", "slower" or "within
  noise". The band is widened by `NOISE_FLOOR` (a factor of 1.1 each way): what varies from one
  run to the next (the clock speed, another program) that the spread inside one run cannot show.
* `check_prediction(predicted, measured, tolerance)`: "as predicted" only when the prediction
  lies in the measured band widened by the model's tolerance; otherwise by how much it misses.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Union

NOISE_FLOOR = 0.10   # run-to-run drift no single run shows: a comparison's smallest band
VERDICTS = ("faster", "slower", "within noise")


def _finite(x: object, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise ValueError(f"{what} must be a finite number, got {x!r}")
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
        xs = sorted(_finite(x, "each sample") for x in samples)
        if not xs:
            raise ValueError("Band.of() needs at least one sample")
        if len(xs) == 1:
            return cls(xs[0], xs[0], xs[0])
        q1, median, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        return cls(median, q1, q3)

    @classmethod
    def exact(cls, value: float) -> "Band":
        """A number known exactly (a count, a published figure): a band of zero width."""
        return cls(value, value, value)

    @property
    def spread(self) -> float:
        """Half the band's width relative to the value (0.03: about +-3%)."""
        return (self.high - self.low) / 2 / abs(self.value) if self.value else math.inf

    @property
    def pm(self) -> str:
        """The spread as text: '±3%', or '±<1%' below half a percent."""
        return f"±{self.spread:.0%}" if self.spread >= 0.005 else "±<1%"

    def contains(self, x: float) -> bool:
        """Whether x lies inside the band."""
        return self.low <= _finite(x, "contains(): x") <= self.high

    def widen(self, tolerance: float) -> "Band":
        """The band stretched by a factor of 1 + tolerance on both sides (0.25: 1.25x each way).

        A positive low end is divided by the factor, so that "within 25%" means the same
        either way; a low end at or below zero (a difference) moves down by that share.
        """
        tolerance = _finite(tolerance, "widen(): tolerance")
        if tolerance < 0:
            raise ValueError(f"widen(): tolerance must be >= 0, got {tolerance}")
        low = (self.low / (1 + tolerance) if self.low > 0
               else self.low - tolerance * abs(self.low))
        return Band(self.value, low, self.high * (1 + tolerance) if self.high > 0
                    else self.high + tolerance * abs(self.high))

    # Interval arithmetic: the result's band holds every outcome of the operands' bands.
    def __add__(self, other: "Band | float") -> "Band":
        o = _band(other)
        return Band(self.value + o.value, self.low + o.low, self.high + o.high)

    __radd__ = __add__

    def __sub__(self, other: "Band | float") -> "Band":
        o = _band(other)
        return Band(self.value - o.value, self.low - o.high, self.high - o.low)

    def __rsub__(self, other: float) -> "Band":
        return _band(other) - self

    def __mul__(self, other: "Band | float") -> "Band":
        o = _band(other)
        corners = [a * b for a in (self.low, self.high) for b in (o.low, o.high)]
        return Band(self.value * o.value, min(corners), max(corners))

    __rmul__ = __mul__

    def __truediv__(self, other: "Band | float") -> "Band":
        o = _band(other)
        if o.low <= 0 <= o.high:
            raise ValueError(f"cannot divide by a band that holds zero: {o}")
        return self * Band(1 / o.value, 1 / o.high, 1 / o.low)

    def __rtruediv__(self, other: float) -> "Band":
        return _band(other) / self

    def __float__(self) -> float:
        return self.value

    def __str__(self) -> str:
        return f"{self.value:.3g} ({self.low:.3g}-{self.high:.3g})"


def _band(x: "Band | float") -> Band:
    # A plain number is a band of zero width; a Measurement (timing.py) has a .band.
    if isinstance(x, Band):
        return x
    band = getattr(x, "band", None)
    if isinstance(band, Band):
        return band
    return Band.exact(_finite(x, "a band or a number"))


BandLike = Union[Band, float]


@dataclass(frozen=True)
class Comparison:
    """How many times as fast one measurement is as another, and the verdict with its band."""

    speedup: Band       # old / new: above 1, `new` is faster
    floor: float = NOISE_FLOOR

    @property
    def band(self) -> Band:
        """The speed-up's band widened by the noise floor: where 'within noise' lies."""
        return self.speedup.widen(self.floor)

    @property
    def verdict(self) -> str:
        """'faster', 'slower' or 'within noise' (the band holds 1)."""
        if self.band.low > 1:
            return "faster"
        if self.band.high < 1:
            return "slower"
        return "within noise"

    def __str__(self) -> str:
        b = self.band
        return f"{self.speedup.value:.2f}x ({b.low:.2f}-{b.high:.2f}x): {self.verdict}"


def compare(new: BandLike, old: BandLike, floor: float = NOISE_FLOOR) -> Comparison:
    """Compare two times (Measurements or Bands of seconds): is `new` faster than `old`?"""
    floor = _finite(floor, "compare(): floor")
    if not 0 <= floor < 1:
        raise ValueError(f"compare(): floor is a fraction in [0, 1), got {floor}")
    new, old = _band(new), _band(old)
    if new.low <= 0 or old.low <= 0:
        raise ValueError(f"compare() needs times > 0, got {new} and {old}")
    return Comparison(old / new, floor)


@dataclass(frozen=True)
class Prediction:
    """A prediction against a measured band, widened by the model's stated tolerance."""

    predicted: float
    measured: Band
    tolerance: float

    @property
    def ok(self) -> bool:
        """Whether the prediction lies in the measured band widened by the tolerance."""
        return self.measured.widen(self.tolerance).contains(self.predicted)

    @property
    def ratio(self) -> float:
        """Measured (median) over predicted: above 1, the model promised too little time."""
        return self.measured.value / self.predicted

    @property
    def words(self) -> str:
        """'as predicted', or by how much the measurement is above or below the prediction."""
        if self.ok:
            return "as predicted"
        return (f"{self.ratio:.2f}x the prediction" if self.ratio >= 1 else
                f"{self.ratio:.2f}x the prediction, below it")

    def __str__(self) -> str:
        return self.words


def check_prediction(predicted: float, measured: BandLike, tolerance: float) -> Prediction:
    """Is `predicted` inside the measured band, widened by `tolerance` (the model's error)?"""
    predicted = _finite(predicted, "check_prediction(): predicted")
    if predicted <= 0:
        raise ValueError(f"check_prediction(): predicted must be > 0, got {predicted}")
    tolerance = _finite(tolerance, "check_prediction(): tolerance")
    if not 0 <= tolerance < 1:
        raise ValueError(f"check_prediction(): tolerance is a fraction in [0, 1), "
                         f"got {tolerance}")
    return Prediction(predicted, _band(measured), tolerance)


def errorbars(values: Iterable[BandLike], scale: float = 1.0) -> list[list[float]]:
    """Matplotlib's `yerr` for bands: each median's distance to its low and to its high end.

    `scale` converts units as the plot does (1e3 for seconds drawn in ms); a plain number or a
    Measurement is taken by its band, so a quoted figure gets no whisker.
    """
    if _finite(scale, "errorbars(): scale") <= 0:
        raise ValueError(f"errorbars(): scale must be > 0 (1e3 for ms), got {scale}")
    bands = [_band(v) for v in values]
    return [[(b.value - b.low) * scale for b in bands],
            [(b.high - b.value) * scale for b in bands]]
