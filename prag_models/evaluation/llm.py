"""The LLM evaluation table: LaMP's metrics per (task, method) with n and 95 % bootstrap intervals, and paired
comparisons of every method with the non-personalized baselines (docs/methods.md §6).

Accuracy, MAE, ROUGE-1 and ROUGE-L are means of per-sample values; RMSE is the root of the mean squared error; macro-F1
is recomputed on each bootstrap resample of the samples. Comparisons use the task's primary metric on the samples both
methods answered, oriented so that a positive difference means "better than the baseline" (for MAE: baseline − method).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from prag_models.data.tasks import LABELS
from prag_models.metrics.intervals import CONFIDENCE, N_RESAMPLES, SEED, Estimate, estimate, paired_difference
from prag_models.metrics.lamp import HIGHER_IS_BETTER, lamp_metrics, per_sample_scores, primary_metric

BASELINES: tuple[str, ...] = ("random", "dense_global")
EVALUATION_COLUMNS = ["task", "method", "metric", "value", "ci_low", "ci_high", "n_samples", "is_primary"]
COMPARISON_COLUMNS = [
    "task", "method", "baseline", "metric", "difference", "ci_low", "ci_high", "n_samples", "better", "worse",
]  # fmt: skip


def _f1_estimate(task: str, predictions: list[str], golds: list[str]) -> Estimate:
    """Macro-F1 with a percentile bootstrap over resampled samples (F1 is not a mean of per-sample values)."""
    value = lamp_metrics(task, predictions, golds)["f1_macro"]
    n = len(golds)
    if n < 2:
        return Estimate(value, value, value, n)
    labels = {label: i for i, label in enumerate(LABELS[task])}
    truth = np.array([labels.get(g.strip(), -1) for g in golds])
    guess = np.array([labels.get(p.strip(), -1) for p in predictions])
    draws = resampled_macro_f1(truth, guess, len(labels), np.random.default_rng(SEED).integers(0, n, (N_RESAMPLES, n)))
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(draws, [alpha, 1 - alpha])
    return Estimate(value, min(float(low), value), max(float(high), value), n)


def resampled_macro_f1(truth: np.ndarray, guess: np.ndarray, n_labels: int, resamples: np.ndarray) -> np.ndarray:
    """Macro-F1 (sklearn's: over every label, 0 where a label is neither true nor predicted, -1 = no label) of each
    resample (rows of sample indices), counted for all resamples at once in blocks."""
    out = []
    for block in np.array_split(resamples, max(1, resamples.size // 2_000_000 + 1)):  # <= 2e6 indices a block
        t, g = truth[block], guess[block]
        row = np.arange(len(block))[:, None] * n_labels  # each resample's own range of label counters
        hits = _label_counts(t + row, (t == g) & (t >= 0), len(block), n_labels)
        denominator = _label_counts(t + row, t >= 0, len(block), n_labels) + _label_counts(
            g + row, g >= 0, len(block), n_labels
        )
        f1 = np.divide(2 * hits, denominator, out=np.zeros(hits.shape), where=denominator > 0)
        out.append(f1.mean(axis=1))
    return np.concatenate(out)


def _label_counts(slots: np.ndarray, keep: np.ndarray, n_resamples: int, n_labels: int) -> np.ndarray:
    """How often each (resample, label) slot occurs where keep holds: n_resamples x n_labels."""
    return np.bincount(slots[keep], minlength=n_resamples * n_labels).reshape(n_resamples, n_labels)


def method_estimates(task: str, predictions: list[str], golds: list[str]) -> dict[str, Estimate]:
    """Every LaMP metric of one method's predictions with its interval and n."""
    per = per_sample_scores(task, predictions, golds)
    out = {}
    for metric, values in per.items():
        out[metric] = estimate(values, "root_mean" if metric == "rmse" else "mean")
    if "accuracy" in per:
        out["f1_macro"] = _f1_estimate(task, predictions, golds)
    return out


def evaluate_generations(task: str, gens: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, metric) of a task's generations (method, sample_id, prediction, gold)."""
    rows = []
    primary = primary_metric(task)
    for method, group in gens.sort_values("sample_id").groupby("method", sort=True):
        preds, golds = group["prediction"].astype(str).tolist(), group["gold"].astype(str).tolist()
        for metric, e in method_estimates(task, preds, golds).items():
            rows.append((task, method, metric, e.value, e.low, e.high, e.n, metric == primary))
    return pd.DataFrame(rows, columns=EVALUATION_COLUMNS)


def compare_with_baselines(task: str, gens: pd.DataFrame, baselines: tuple[str, ...] = BASELINES) -> pd.DataFrame:
    """Paired difference of the primary metric of every method against each baseline present (positive = better)."""
    metric = primary_metric(task)
    values = per_sample_scores(task, gens["prediction"].astype(str).tolist(), gens["gold"].astype(str).tolist())
    frame = gens[["method", "sample_id"]].assign(value=values[metric])
    wide = frame.pivot_table(index="sample_id", columns="method", values="value", aggfunc="first")
    higher = HIGHER_IS_BETTER[metric]
    rows = []
    for baseline in baselines:
        if baseline not in wide:
            continue
        for method in sorted(m for m in wide.columns if m != baseline):
            both = wide[[method, baseline]].dropna()
            a, b = both[method].to_numpy(), both[baseline].to_numpy()
            d = paired_difference(a, b) if higher else paired_difference(b, a)
            rows.append((task, method, baseline, metric, d.value, d.low, d.high, d.n, d.low > 0, d.high < 0))
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
