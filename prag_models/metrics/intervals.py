"""Uncertainty of evaluation numbers: 95 % bootstrap intervals over samples, and paired differences of two methods.

Every interval resamples the evaluation samples (questions) with replacement, with a fixed seed, through
``scipy.stats.bootstrap`` (percentile method: it stays defined when every resample gives the same value, where BCa
does not). A metric is a statistic of per-sample values: the mean (accuracy, MAE, ROUGE, R@k, NDCG@k, MRR) or the
root of the mean (RMSE over squared errors). A paired difference resamples the same samples for both methods, so it
is the right interval for "is A better than B on these questions", narrower than comparing two separate intervals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Statistics a metric can be: the mean of per-sample values, or the root of that mean (RMSE of squared errors).
STATISTICS: tuple[str, ...] = ("mean", "root_mean")
CONFIDENCE = 0.95
N_RESAMPLES = 2000
SEED = 0


@dataclass(frozen=True)
class Estimate:
    """A metric value with its bootstrap interval and the number of samples behind it."""

    value: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        """Half the interval's width (what ``value ± half_width`` prints)."""
        return (self.high - self.low) / 2.0

    def excludes_zero(self) -> bool:
        """True when the interval lies entirely above or entirely below 0 (for differences)."""
        return self.low > 0.0 or self.high < 0.0


def _apply(statistic: str, values: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """The statistic of per-sample values along an axis."""
    mean = np.mean(values, axis=axis)
    return np.sqrt(mean) if statistic == "root_mean" else mean


def _check(statistic: str) -> None:
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")


def _interval(data: tuple[np.ndarray, ...], fn, paired: bool, confidence: float, n_resamples: int, seed: int):
    """(low, high) of a percentile bootstrap of fn over the data; the point itself when every value is equal."""
    from scipy.stats import bootstrap

    if all(np.ptp(d) == 0 for d in data):  # no spread: every resample gives the point (scipy would warn)
        point = float(fn(*data, axis=-1))
        return point, point
    result = bootstrap(
        data,
        fn,
        paired=paired,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def estimate(
    values: Sequence[float] | np.ndarray,
    statistic: str = "mean",
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> Estimate:
    """The statistic of per-sample values with its bootstrap interval (NaNs everywhere when there is no sample)."""
    _check(statistic)
    x = np.asarray(values, dtype=np.float64).ravel()
    if len(x) == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    value = float(_apply(statistic, x))
    if len(x) == 1:
        return Estimate(value, value, value, 1)
    low, high = _interval((x,), lambda a, axis=-1: _apply(statistic, a, axis), False, confidence, n_resamples, seed)
    return Estimate(value, min(low, value), max(high, value), len(x))


def paired_difference(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    statistic: str = "mean",
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> Estimate:
    """statistic(a) − statistic(b) over the same samples (a[i], b[i] belong to sample i), with a paired interval."""
    _check(statistic)
    x, y = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if len(x) != len(y):
        raise ValueError(f"paired values need equal lengths, got {len(x)} and {len(y)}")
    if len(x) == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)

    def diff(p: np.ndarray, q: np.ndarray, axis: int = -1) -> np.ndarray:
        return _apply(statistic, p, axis) - _apply(statistic, q, axis)

    value = float(diff(x, y))
    if len(x) == 1:
        return Estimate(value, value, value, 1)
    if statistic == "mean":  # the mean difference is the mean of differences: resample one array (exact, faster)
        low, high = _interval((x - y,), lambda d, axis=-1: np.mean(d, axis=axis), False, confidence, n_resamples, seed)
    else:
        low, high = _interval((x, y), diff, True, confidence, n_resamples, seed)
    return Estimate(value, min(low, value), max(high, value), len(x))


def format_estimate(e: Estimate, digits: int = 3) -> str:
    """``value ± half-width (n=…)``, or ``–`` when there is no sample."""
    if e.n == 0 or math.isnan(e.value):
        return "–"
    return f"{e.value:.{digits}f} ± {e.half_width:.{digits}f} (n={e.n})"
