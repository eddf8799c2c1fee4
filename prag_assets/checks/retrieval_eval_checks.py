"""Blocking check of the LLM-free retrieval evaluation: values and intervals in range, n positive."""

import pandas as pd

from prag_assets.assets import retrieval_evaluation
from prag_assets.checks.lamp_checks import table_check
from prag_models.config.settings import Settings
from prag_models.data.truth import LABEL_FIELDS
from prag_models.storage.validation import Expect, between, min_rows, not_null, unique


def _suite(task: str, settings: Settings) -> list[Expect]:
    """At least one row where labels can score the task: the demo's relevance labels, or document labels (LaMP-1/2/3);
    LaMP-4/5/7 files carry none, and the LLM utility decides them (docs/methods.md §6.7)."""
    labelled = settings.data.source == "demo" or task in LABEL_FIELDS
    return [
        *not_null("method", "metric", "value", "ci_low", "ci_high"),
        unique("method", "metric"),
        *([min_rows(1)] if labelled else []),
        between("value", 0.0, 1.0),
        Expect("ExpectColumnValuesToBeBetween", {"column": "n_samples", "min_value": 1}),
    ]


def _extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    bad = df[(df["ci_low"] > df["value"] + 1e-12) | (df["ci_high"] < df["value"] - 1e-12)]
    return [
        f"{r.method} {r.metric}: {r.value} outside its interval [{r.ci_low}, {r.ci_high}]" for r in bad.itertuples()
    ]


retrieval_eval_checks = [
    table_check(
        retrieval_evaluation.lamp_retrieval_evaluation,
        "lamp_retrieval_evaluation",
        "retrieval_metrics_valid",
        "Every retrieval metric in [0, 1], inside its 95 % interval, over at least one sample (a task no label can "
        "score, LaMP-4/5/7 on real files, has no rows).",
        _suite,
        _extra,
    )
]
