"""Blocking check of the LLM-free retrieval evaluation: values and intervals in range, n positive."""

import pandas as pd

from prag_assets.assets import retrieval_evaluation
from prag_assets.checks.lamp_checks import table_check
from prag_models.config.settings import Settings
from prag_models.storage.validation import Expect, between, min_rows, not_null, unique


def _suite(task: str, settings: Settings) -> list[Expect]:
    return [
        *not_null("method", "metric", "value", "ci_low", "ci_high"),
        unique("method", "metric"),
        min_rows(1),
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
        "Every retrieval metric in [0, 1], inside its 95 % interval, over at least one sample.",
        _suite,
        _extra,
    )
]
