"""Uncertainty of evaluation numbers: 95 % bootstrap intervals over samples, and paired differences of two methods.

Every interval resamples the evaluation samples (questions) with replacement, with a fixed seed, through
``scipy.stats.bootstrap`` (percentile method: it stays defined when every resample gives the same value, where BCa
does not). A metric is a statistic of per-sample values: the mean (accuracy, MAE, ROUGE, R@k, NDCG@k, MRR) or the
root of the mean (RMSE over squared errors). A paired difference resamples the same samples for both methods, so it
is the right interval for "is A better than B on these questions", narrower than comparing two separate intervals.

Families of comparisons are controlled with Holm's procedure (the numbers of statsmodels' ``multipletests``) on the
two-sided p-values of the paired t-test (``scipy.stats.ttest_rel``): a bootstrap with 2000 resamples cannot give a
p-value below about 1/1000, too coarse for Holm's smallest thresholds (0.05/114). The sample size that would give a
paired comparison 80 % power is the same t-test's (``statsmodels.stats.power.TTestPower``); proportions (how often a
verdict ships) get Wilson intervals (``statsmodels.stats.proportion.proportion_confint``).
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


@dataclass(frozen=True)
class Bootstrap:
    """How an interval resamples the samples: its confidence level, the number of resamples and the seed."""

    confidence: float = CONFIDENCE
    n_resamples: int = N_RESAMPLES
    seed: int = SEED


def _apply(statistic: str, values: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """The statistic of per-sample values along an axis."""
    mean = np.mean(values, axis=axis)
    return np.sqrt(mean) if statistic == "root_mean" else mean


def _check(statistic: str) -> None:
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")


def _interval(data: tuple[np.ndarray, ...], fn, paired: bool, how: Bootstrap):
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
        n_resamples=how.n_resamples,
        confidence_level=how.confidence,
        method="percentile",
        rng=np.random.default_rng(how.seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def estimate(
    values: Sequence[float] | np.ndarray, statistic: str = "mean", bootstrap: Bootstrap = Bootstrap()
) -> Estimate:
    """The statistic of per-sample values with its bootstrap interval (NaNs everywhere when there is no sample).
    Where every value is the same 0 or 1 (a proportion of n hits or misses, n = 1 included) the bootstrap has no
    spread to resample, so the mean's interval is Wilson's; any other single value has no interval (NaN): a figure
    is never shown as a point with ± 0 (issue 50)."""
    _check(statistic)
    x = np.asarray(values, dtype=np.float64).ravel()
    if len(x) == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    value = float(_apply(statistic, x))
    if statistic == "mean" and np.ptp(x) == 0 and value in (0.0, 1.0):
        from statsmodels.stats.proportion import proportion_confint

        low, high = proportion_confint(int(x.sum()), len(x), alpha=1 - bootstrap.confidence, method="wilson")
        return Estimate(value, min(float(low), value), max(float(high), value), len(x))  # 1 - 1e-16 is 1
    if len(x) == 1:
        return Estimate(value, math.nan, math.nan, 1)
    low, high = _interval((x,), lambda a, axis=-1: _apply(statistic, a, axis), False, bootstrap)
    return Estimate(value, min(low, value), max(high, value), len(x))


def paired_difference(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    statistic: str = "mean",
    bootstrap: Bootstrap = Bootstrap(),
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
        low, high = _interval((x - y,), lambda d, axis=-1: np.mean(d, axis=axis), False, bootstrap)
    else:
        low, high = _interval((x, y), diff, True, bootstrap)
    return Estimate(value, min(low, value), max(high, value), len(x))


def paired_p_value(differences: Sequence[float] | np.ndarray) -> float:
    """Two-sided p-value of the paired t-test that the mean of per-sample differences is 0 (scipy ``ttest_1samp``,
    which is ``ttest_rel`` on a − b): 1 without a difference or sample, 0 when every difference is the same non-zero
    value."""
    from scipy.stats import ttest_1samp

    d = np.asarray(differences, dtype=np.float64).ravel()
    if len(d) == 0 or not np.any(d):
        return 1.0
    if np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())):  # a constant non-zero difference: t is infinite
        return 0.0 if len(d) > 1 else 1.0
    return float(ttest_1samp(d, 0.0).pvalue)


def shown_above(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple[Estimate, bool]:
    """(the paired gain of a over b, whether it is shown: its 95 % interval above 0 and the paired t-test's one-sided
    p below 2.5 %; the percentile interval alone is narrower than the test at small n)."""
    gain = paired_difference(a, b)
    if gain.n == 0:
        return gain, False
    d = np.asarray(a, dtype=np.float64).ravel() - np.asarray(b, dtype=np.float64).ravel()
    p_two = paired_p_value(d)
    return gain, bool(gain.low > 0 and p_two / 2 < (1 - CONFIDENCE) / 2)


def holm(p_values: Sequence[float] | np.ndarray, alpha: float = 1 - CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down control of the family-wise error rate over a family of p-values: (rejected, adjusted p)."""
    # The same numbers as statsmodels' multipletests(method="holm") (tests/test_intervals.py holds them equal), which
    # runs gc.collect() on every call: 0.4 s each in a run's process, 4 s of the demo's main job.
    p = np.asarray(p_values, dtype=np.float64).ravel()
    if len(p) == 0:
        return np.zeros(0, dtype=bool), np.zeros(0)
    order = np.argsort(p, kind="stable")
    steps = np.maximum.accumulate(p[order] * np.arange(len(p), 0, -1))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(steps, 1.0)
    below = p[order] <= alpha / np.arange(len(p), 0, -1)
    passed = int(np.argmin(below)) if not below.all() else len(p)  # the step-down stops at its first failure
    rejected = np.zeros(len(p), dtype=bool)
    rejected[order[:passed]] = True
    return rejected, adjusted


def samples_for_power(
    differences: Sequence[float] | np.ndarray, power: float = 0.8, alpha: float = 1 - CONFIDENCE
) -> int | None:
    """Samples a two-sided paired t-test needs for ``power`` at the observed effect (mean / sd of the per-sample
    differences; statsmodels ``TTestPower``); None when there is no effect to detect (mean 0 or no spread)."""
    from statsmodels.stats.power import TTestPower

    d = np.asarray(differences, dtype=np.float64).ravel()
    if len(d) < 2 or np.std(d, ddof=1) == 0 or np.mean(d) == 0:
        return None
    effect = abs(float(np.mean(d) / np.std(d, ddof=1)))
    try:
        n = TTestPower().solve_power(effect_size=effect, power=power, alpha=alpha, alternative="two-sided")
    except (ValueError, RuntimeError):  # no convergence for a vanishing effect
        return None
    n = float(np.asarray(n).ravel()[0])
    return int(math.ceil(n)) if math.isfinite(n) else None


def planned_samples(
    differences: Sequence[float] | np.ndarray, minimum: int, maximum: int, power: float, sd_confidence: float = 0.8
) -> int:
    """Samples a paired t-test needs for ``power`` at a pilot's mean difference, within [minimum, maximum]; the
    minimum when the pilot shows no gain (more samples would not show one). A small pilot's spread is an uncertain
    guess, so the plan takes the upper ``sd_confidence`` confidence limit of its standard deviation (Browne 1995:
    s·√((n−1)/χ²_{1−c, n−1})), which keeps the power at least as planned for 80 % of pilots."""
    from scipy.stats import chi2

    d = np.asarray(differences, dtype=np.float64).ravel()
    if len(d) < 2 or float(np.mean(d)) <= 0 or np.std(d, ddof=1) == 0:
        return int(max(0, min(minimum, maximum)))
    inflate = math.sqrt((len(d) - 1) / chi2.ppf(1 - sd_confidence, len(d) - 1)) if sd_confidence > 0 else 1.0
    widened = float(np.mean(d)) + (d - float(np.mean(d))) * inflate  # same mean, the spread at its upper limit
    needed = samples_for_power(widened, power)
    wanted = minimum if needed is None else max(minimum, needed)
    return int(max(0, min(wanted, maximum)))


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson interval of a proportion (statsmodels ``proportion_confint``); (0, 1) without a trial."""
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return 0.0, 1.0
    low, high = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
    return float(low), float(high)


def format_estimate(e: Estimate, digits: int = 3) -> str:
    """``value ± half-width (n=…)``, or ``–`` when there is no sample."""
    if e.n == 0 or math.isnan(e.value):
        return "–"
    return f"{e.value:.{digits}f} ± {e.half_width:.{digits}f} (n={e.n})"
