"""The promotion gate decides as the verdict does (issue 48, defect 2): a difference is shown only where its 95 %
interval lies on one side of 0 and the paired t-test agrees (the percentile interval alone is narrower than the test
at small n), and a retrieval metric that cannot see the task (label-hit without relevance labels on LaMP-1) is no
evidence."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from prag_models.config.settings import load_settings
from prag_models.metrics.intervals import paired_difference, paired_p_value
from prag_models.mlops.gate import PairedEvidence, decide_promotion
from prag_models.stages.promotion_evidence import evidence_rows

#: 8 paired differences whose percentile interval lies above 0 while the paired t-test's one-sided p is 0.046
SMALL = np.array([0.05, 0.074, 0.028, -0.021, 0.014, -0.029, 0.055, 0.157])


def test_an_interval_above_zero_without_the_paired_test_promotes_nothing() -> None:
    assert paired_difference(SMALL, np.zeros(8)).low > 0 and paired_p_value(SMALL) / 2 > 0.025
    verdict = decide_promotion("LaMP-2", [PairedEvidence("llm utility", "utility", True, SMALL, np.zeros(8), 8)])
    assert not verdict.promote, verdict.message
    clear = np.linspace(0.05, 0.15, 20)
    assert decide_promotion("LaMP-2", [PairedEvidence("retrieval", "ndcg@3", True, clear, np.zeros(20))]).promote


def test_a_label_hit_that_cannot_see_the_task_is_not_a_leg(tmp_path) -> None:
    settings = load_settings(environ={}, home=str(tmp_path))
    with duckdb.connect(str(tmp_path / "t.duckdb")) as con:
        summary = pd.DataFrame({"task": ["LaMP-1", "LaMP-2"], "metric": ["label_hit@3"] * 2, "is_primary": [True] * 2})
        scores = pd.DataFrame([(t, m, f"s{i}", "label_hit@3", float(i % 2)) for t in ("LaMP-1", "LaMP-2")
                               for m in ("cfrag", "cfrag@champion") for i in range(10)],
                              columns=["task", "method", "sample_id", "metric", "value"])  # fmt: skip
        con.register("summary_rows", summary)
        con.register("score_rows", scores)
        con.execute("CREATE TABLE lamp_retrieval_evaluation AS SELECT * FROM summary_rows")
        con.execute("CREATE TABLE lamp_retrieval_sample_scores AS SELECT * FROM score_rows")
        blind = evidence_rows(con, "LaMP-1", "b2", "b1", settings)
        seen = evidence_rows(con, "LaMP-2", "b2", "b1", settings)
    assert blind.empty  # LaMP-1's label is a paper title: label-hit cannot see its retrieval
    assert set(seen["evidence"]) == {"retrieval"} and len(seen) == 10
