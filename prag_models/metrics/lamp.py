"""LaMP metrics with the official semantics (docs/methods.md §1): accuracy/macro-F1, MAE/RMSE, ROUGE-1/ROUGE-L."""

from __future__ import annotations

import math
from collections.abc import Sequence

from prag_models.data.tasks import LABELS, TASK_KIND

#: Metric names per task kind, and whether higher is better.
METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "f1_macro"),
    "rating": ("mae", "rmse"),
    "generation": ("rouge1", "rougeL"),
}
HIGHER_IS_BETTER = {"accuracy": True, "f1_macro": True, "mae": False, "rmse": False, "rouge1": True, "rougeL": True}


def metric_bounds(metric: str) -> tuple[float, float]:
    """The range a metric value must lie in (used by the evaluation checks)."""
    return (0.0, 4.0) if metric in {"mae", "rmse"} else (0.0, 1.0)


def primary_metric(task: str) -> str:
    """The metric a task is ranked by (accuracy, MAE or ROUGE-1)."""
    return METRICS[TASK_KIND[task]][0]


def _rating(prediction: str, gold: float) -> float:
    """A numeric prediction, or the rating farthest from the gold when it is not a number (LaMP-3 rule)."""
    try:
        return float(prediction.strip())
    except ValueError:
        return 1.0 if abs(1.0 - gold) > abs(5.0 - gold) else 5.0


def per_sample_scores(task: str, predictions: Sequence[str], golds: Sequence[str]) -> dict[str, list[float]]:
    """Per-sample values whose mean (or root of mean for RMSE) gives the metric; used for feedback labels too."""
    kind = TASK_KIND[task]
    preds = [p.strip() for p in predictions]
    if kind == "classification":
        return {"accuracy": [float(p == g.strip()) for p, g in zip(preds, golds, strict=True)]}
    if kind == "rating":
        err = [abs(_rating(p, float(g)) - float(g)) for p, g in zip(preds, golds, strict=True)]
        return {"mae": err, "rmse": [e * e for e in err]}
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=False)
    scores = [scorer.score(g, p) for p, g in zip(preds, golds, strict=True)]
    return {"rouge1": [s["rouge1"].fmeasure for s in scores], "rougeL": [s["rougeL"].fmeasure for s in scores]}


def lamp_metrics(task: str, predictions: Sequence[str], golds: Sequence[str]) -> dict[str, float]:
    """The task's official metrics over a set of predictions."""
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions for {len(golds)} golds")
    if not golds:
        raise ValueError("no samples to evaluate")
    kind = TASK_KIND[task]
    per = per_sample_scores(task, predictions, golds)
    if kind == "classification":
        from sklearn.metrics import f1_score

        labels = list(LABELS[task])
        index = {label: i for i, label in enumerate(labels)}
        y_true = [index.get(g.strip(), -1) for g in golds]
        y_pred = [index.get(p.strip(), -1) for p in predictions]
        f1 = f1_score(y_true, y_pred, labels=list(range(len(labels))), average="macro", zero_division=0)
        return {"accuracy": sum(per["accuracy"]) / len(golds), "f1_macro": float(f1)}
    if kind == "rating":
        return {"mae": sum(per["mae"]) / len(golds), "rmse": math.sqrt(sum(per["rmse"]) / len(golds))}
    return {name: sum(values) / len(golds) for name, values in per.items()}


def sample_quality(task: str, prediction: str, gold: str) -> float:
    """One sample's score for LLM feedback (docs/methods.md §2.5): accuracy, negated absolute error, or ROUGE-1."""
    per = per_sample_scores(task, [prediction], [gold])
    if "mae" in per:
        return -per["mae"][0]
    return per[primary_metric(task)][0] if primary_metric(task) in per else next(iter(per.values()))[0]
