"""Stage 6a (retrieval evaluation): every LaMP retrieval path scored without an LLM (docs/methods.md §6)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import pandas as pd

from prag_models.data import truth as data_truth
from prag_models.evaluation import retrieval as rev
from prag_models.evaluation.report import REFERENCE_METHODS
from prag_models.stages.generation import RETRIEVAL_TABLES
from prag_models.storage.store import read_rows, table_exists


def load_runs(con, task: str) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Every retrieval row of a task, and per method the samples it ran on: those its table covers (a table runs all
    its methods on the same samples, so a sample a method returned nothing for still counts, as a miss), except the
    methods that run on the LLM-evaluation samples only."""
    frames, method_samples = [], {}
    for table in RETRIEVAL_TABLES:
        if not table_exists(con, table):
            continue
        frame = read_rows(con, table, {"task": task})
        samples = sorted(frame["sample_id"].astype(str).unique())
        method_samples |= {m: samples for m in frame["method"].unique()}
        for method in set(rev.LLM_SUBSET_METHODS) & set(frame["method"]):  # run on the LLM-evaluation samples only
            method_samples[method] = sorted(frame.loc[frame["method"] == method, "sample_id"].astype(str).unique())
        frames.append(frame)
    runs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["method", "sample_id"])
    runs["sample_id"] = runs["sample_id"].astype(str)
    return runs, method_samples


def load_truth(
    con, task: str, doc_ids: Collection[str] | None = None
) -> tuple[dict[str, set[str]] | None, dict[str, str] | None, dict[str, str]]:
    """Relevant docs per dev sample (None without relevance labels), labels of the given docs (of all when None;
    None for tasks without labels) and golds in the labels' terms (prag_models.data.truth)."""
    truth = data_truth.load_truth(con, task, "dev", doc_ids)
    return truth.relevant, truth.labels, truth.golds


#: (per-sample scores, summary, comparisons) of one task, or None when nothing can be scored.
Scored = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]
_TYPES = {"task": "object", "method": "object", "metric": "object", "baseline": "object", "sample_id": "object",
          "value": "float64", "ci_low": "float64", "ci_high": "float64", "difference": "float64",
          "n_samples": "int64", "is_primary": "bool", "better": "bool", "worse": "bool"}  # fmt: skip


def empty_tables() -> Scored:
    """The three tables of a task no label can score, with no rows: written so that a task's stale rows go and a run
    whose tasks all lack labels still has the tables its checks and the verdict read (issue 48, defect 0)."""

    def frame(columns: list[str]) -> pd.DataFrame:
        return pd.DataFrame({c: pd.Series(dtype=_TYPES[c]) for c in columns})

    return (frame(["method", "sample_id", "metric", "value", "task"]), frame(rev.SUMMARY_COLUMNS),
            frame(rev.COMPARISON_COLUMNS))  # fmt: skip


def retrieval_evaluation_tables(con, task: str, k: int) -> tuple[Scored | None, dict[str, Any]]:
    """Score a task's retrieval tables: per-sample scores, the summary with intervals, the paired comparisons."""
    runs, method_samples = load_runs(con, task)
    retrieved = runs["doc_id"].astype(str).unique().tolist() if "doc_id" in runs else []
    relevant, labels, golds = load_truth(con, task, retrieved)  # the labels of the retrieved documents only
    scores = rev.per_sample_scores(runs, method_samples, k, relevant, labels, golds)
    if scores.empty:
        return None, {}
    primary = rev.primary_retrieval_metric(relevant is not None, k)
    summary = rev.summarize(task, scores, primary)
    comparison = rev.compare(task, scores)
    ranked = summary[summary["metric"] == primary].sort_values("value", ascending=False)
    reference = ranked["method"].isin(REFERENCE_METHODS)  # sees the planted truth: a ceiling, not a method to pick
    stats: dict[str, Any] = {"primary": primary, "methods": int(summary["method"].nunique())}
    if (~reference).any():
        stats["best_method"] = ranked.loc[~reference, "method"].iloc[0]
    if reference.any():
        stats["reference_ceiling"] = float(ranked.loc[reference, "value"].iloc[0])
    return (scores.assign(task=task), summary, comparison), stats
