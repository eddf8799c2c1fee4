"""Retrieval evaluation of LaMP retrieval paths without an LLM: relevance metrics with intervals, paired comparisons.

Where the truth is known (the demo records, for every sample, the relevant documents: the asker's community, the
sample's topic, a label that is not a noise flip) every method is scored per sample at k = the number of documents it
puts in the prompt:

- ``recall@k``: relevant documents in the top k divided by min(k, number of relevant documents) (capped recall, so a
  perfect top-k scores 1 however many documents are relevant);
- ``ndcg@k``: binary NDCG; ``mrr@k``: 1 / rank of the first relevant document (0 if none in the top k).

Where no relevance exists (LaMP files), ``label_hit@k`` still measures retrieval for the label tasks: the share of the
k retrieved documents whose own label equals the sample's gold output — LaMP-2 tag, LaMP-3 score, and for LaMP-1 the
document's title against the title of the chosen reference ([1] or [2] of the input); it is reported on the demo too.
A sample for which a method returns fewer than k documents counts the missing ones as misses.
Every value carries n and a 95 % bootstrap interval (``prag_models.metrics.intervals``); each method is compared with
``random`` and ``dense_global`` on the samples both cover (paired differences, positive = better than the baseline),
and a tuned method with its untuned ``<method>@default`` (docs/methods.md §3.9).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from prag_models.data.truth import LABEL_FIELDS as LABEL_FIELDS  # re-exported for the evaluation
from prag_models.data.truth import document_label as document_label
from prag_models.data.truth import gold_label as gold_label
from prag_models.metrics.intervals import estimate, paired_difference

RELEVANCE_METRICS: tuple[str, ...] = ("recall", "ndcg", "mrr")
BASELINES: tuple[str, ...] = ("random", "dense_global")
#: Reference rows that are no candidate (the oracle knows the planted communities): labelled, never "best".
REFERENCE_METHODS: tuple[str, ...] = ("oracle_community",)
REFERENCE_LABEL = " (reference: ceiling, not a candidate)"


def candidates(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a table whose method is a candidate (the reference rows removed)."""
    return table[~table["method"].isin(REFERENCE_METHODS)]


def label_references(methods: pd.Index) -> list[str]:
    """Method names with the reference rows labelled as such."""
    return [f"{m}{REFERENCE_LABEL}" if m in REFERENCE_METHODS else m for m in methods]
#: Methods that need LLM calls per sample and so run on the LLM-evaluation samples only (data.llm_eval_samples).
LLM_SUBSET_METHODS: tuple[str, ...] = ("pbr",)
SUMMARY_COLUMNS = ["task", "method", "metric", "value", "ci_low", "ci_high", "n_samples", "is_primary"]
COMPARISON_COLUMNS = [
    "task", "method", "baseline", "metric", "difference", "ci_low", "ci_high", "n_samples", "better", "worse",
]  # fmt: skip


def metric_name(metric: str, k: int) -> str:
    """The column name of a metric at depth k, e.g. ``ndcg@3``."""
    return f"{metric}@{k}"


def primary_retrieval_metric(has_relevance: bool, k: int) -> str:
    """The metric a task's retrieval is ranked by: NDCG@k where relevance is known, else label-hit@k."""
    return metric_name("ndcg" if has_relevance else "label_hit", k)


def _relevance_scores(ranked: Sequence[str], relevant: set[str], k: int) -> dict[str, float]:
    """Capped recall, binary NDCG and reciprocal rank of one ranked list at depth k."""
    top = list(ranked[:k])
    hits = [doc in relevant for doc in top]
    if not relevant:
        return {"recall": 0.0, "ndcg": 0.0, "mrr": 0.0}
    dcg = sum(1.0 / math.log2(i + 2) for i, hit in enumerate(hits) if hit)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    first = next((i for i, hit in enumerate(hits) if hit), None)
    return {
        "recall": sum(hits) / min(k, len(relevant)),
        "ndcg": dcg / ideal,
        "mrr": 0.0 if first is None else 1.0 / (first + 1),
    }


def per_sample_scores(
    runs: pd.DataFrame,
    method_samples: Mapping[str, Sequence[str]],
    k: int,
    relevant: Mapping[str, set[str]] | None = None,
    doc_labels: Mapping[str, str] | None = None,
    golds: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """One row per (method, sample, metric) with the sample's value.

    ``runs`` holds the retrieval rows (method, sample_id, rank, doc_id); ``method_samples`` the samples each method
    was asked to retrieve for (a sample without rows scores 0). ``relevant`` maps a sample to its relevant doc ids
    (None: no relevance metrics); ``doc_labels`` + ``golds`` enable label-hit@k (None: not reported).
    """
    ranked: dict[tuple[str, str], list[str]] = {}
    if len(runs):
        ordered = runs.sort_values(["method", "sample_id", "rank"], kind="stable")
        keys = zip(ordered["method"].tolist(), ordered["sample_id"].tolist(), strict=True)
        for key, doc in zip(keys, ordered["doc_id"].astype(str).tolist(), strict=True):
            ranked.setdefault(key, []).append(doc)
    rows: list[tuple[str, str, str, float]] = []
    for method, samples in method_samples.items():
        for sample in samples:
            docs = ranked.get((method, sample), [])
            if relevant is not None:
                for metric, value in _relevance_scores(docs, relevant.get(sample, set()), k).items():
                    rows.append((method, sample, metric_name(metric, k), value))
            if doc_labels is not None and golds is not None and sample in golds:
                hit = sum(1 for d in docs[:k] if doc_labels.get(d) == golds[sample]) / k
                rows.append((method, sample, metric_name("label_hit", k), hit))
    return pd.DataFrame(rows, columns=["method", "sample_id", "metric", "value"])


def summarize(task: str, scores: pd.DataFrame, primary: str) -> pd.DataFrame:
    """Value, 95 % interval and n of every (method, metric)."""
    rows = []
    for (method, metric), group in scores.groupby(["method", "metric"], sort=True):
        e = estimate(group["value"].to_numpy())
        rows.append((task, method, metric, e.value, e.low, e.high, e.n, metric == primary))
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def compare(task: str, scores: pd.DataFrame, baselines: Sequence[str] = BASELINES) -> pd.DataFrame:
    """Paired difference (method − baseline) of every metric on the samples both cover, with its 95 % interval; a
    tuned method is also compared with its ``<method>@default``."""
    wide = scores.pivot_table(index=["metric", "sample_id"], columns="method", values="value", aggfunc="first")
    rows = []
    for metric in sorted(scores["metric"].unique()):
        part = wide.loc[metric]
        for baseline in baselines:
            if baseline not in part:
                continue
            for method in sorted(part.columns):
                if method == baseline:
                    continue
                both = part[[method, baseline]].dropna()
                d = paired_difference(both[method].to_numpy(), both[baseline].to_numpy())
                better, worse = d.n > 0 and d.low > 0, d.n > 0 and d.high < 0
                rows.append((task, method, baseline, metric, d.value, d.low, d.high, d.n, better, worse))
        for method in sorted(m for m in part.columns if f"{m}@default" in part):  # what per-task tuning buys
            both = part[[method, f"{method}@default"]].dropna()
            d = paired_difference(both[method].to_numpy(), both[f"{method}@default"].to_numpy())
            better, worse = d.n > 0 and d.low > 0, d.n > 0 and d.high < 0
            rows.append((task, method, f"{method}@default", metric, d.value, d.low, d.high, d.n, better, worse))
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def _cell(value: float, low: float, high: float) -> str:
    """``value ± half-width`` with three decimals (– for no value)."""
    return "–" if pd.isna(value) else f"{value:.3f} ± {(high - low) / 2:.3f}"


def summary_markdown(summary: pd.DataFrame, comparisons: pd.DataFrame) -> str:
    """Per task: methods × metrics as value ± half-width with n, best candidate's primary value in bold (the oracle is a
    labelled reference row); then the primary
    metric's paired differences against each baseline (▲ better, ▼ worse, = intervals include 0)."""
    if summary.empty:
        return "_no retrieval evaluation rows_"
    parts = []
    for task, part in summary.groupby("task", sort=True):
        primary = part.loc[part["is_primary"], "metric"].iloc[0] if part["is_primary"].any() else ""
        cells = part.assign(cell=[_cell(v, lo, hi) for v, lo, hi in part[["value", "ci_low", "ci_high"]].values])
        wide = cells.pivot_table(index="method", columns="metric", values="cell", aggfunc="first")
        n = part.groupby("method")["n_samples"].max()
        if primary:  # the best candidate in bold; the oracle is a reference, never the best
            mine = candidates(part[part["metric"] == primary])
            for method in mine[mine["value"] == mine["value"].max()]["method"]:
                wide.at[method, primary] = f"**{wide.at[method, primary]}**"
        wide.insert(0, "n", n)
        comp = comparisons[(comparisons["task"] == task) & (comparisons["metric"] == primary)]
        for baseline, rows in comp.groupby("baseline"):
            marks = {
                r.method: ("▲" if r.better else "▼" if r.worse else "=") + f" {r.difference:+.3f} ± "
                f"{(r.ci_high - r.ci_low) / 2:.3f}"
                for r in rows.itertuples()
            }
            wide[f"Δ{primary} vs {baseline}"] = [marks.get(m, "") for m in wide.index]
        wide = wide.sort_values("n", ascending=False, kind="stable")
        wide.index = pd.Index(label_references(wide.index), name=wide.index.name)
        parts.append(f"### {task} (primary: {primary}; 95 % bootstrap intervals)\n\n" + wide.fillna("").to_markdown())
    return "\n\n".join(parts)
