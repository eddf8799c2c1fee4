"""The LLM-free retrieval evaluation in the graph, on a demo where collaboration matters (fake generator)."""

from __future__ import annotations

import duckdb
import pytest
from conftest import EVALUATED_TASK

TASK = EVALUATED_TASK


@pytest.fixture(scope="module")
def evaluated(evaluated_graph):
    """The session's retrieval-evaluation demo (tests/session_graphs.py `evaluated_graph`, tuning on: ClusterRAG's tuned
    methods also keep an @default row); an open read-only connection and the run."""
    _, home, result = evaluated_graph
    con = duckdb.connect(str(home / "prag.duckdb"), read_only=True)
    yield con, result
    con.close()


def test_every_method_is_scored_with_n_and_an_interval(evaluated) -> None:
    con, _ = evaluated
    table = con.execute("SELECT * FROM lamp_retrieval_evaluation WHERE task = ?", [TASK]).df()
    methods = set(table["method"])
    assert {"random", "dense", "dense_global", "oracle_community", "clusterrag_community", "cfrag", "pbr"} <= methods
    assert {"recall@2", "ndcg@2", "mrr@2", "label_hit@2"} <= set(table["metric"])
    assert ((table["ci_low"] <= table["value"]) & (table["value"] <= table["ci_high"])).all()
    n = table.groupby("method")["n_samples"].max()
    assert n["dense"] == 24 and n["pbr"] == 6  # P-PRF needs the LLM: only the LLM-evaluation samples
    assert table.loc[table["is_primary"], "metric"].unique().tolist() == ["ndcg@2"]


def test_planted_truth_orders_the_ceiling_and_the_baselines(evaluated) -> None:
    """The oracle (true community) is the ceiling; searching everyone is not personalization's upper bound."""
    con, _ = evaluated
    ndcg = dict(
        con.execute(
            "SELECT method, value FROM lamp_retrieval_evaluation WHERE task = ? AND metric = 'ndcg@2'", [TASK]
        ).fetchall()
    )
    assert ndcg["oracle_community"] == max(ndcg.values())
    comp = con.execute(
        "SELECT method, baseline, better FROM lamp_retrieval_comparisons WHERE task = ? AND metric = 'ndcg@2'", [TASK]
    ).df()
    better = {(m, b) for m, b, ok in comp.itertuples(index=False) if ok}
    assert ("oracle_community", "dense_global") in better and ("dense", "random") in better


def test_the_checks_passed(evaluated) -> None:
    _, result = evaluated
    checks = {
        f"{e.event_specific_data.asset_check_key.asset_key.to_user_string()}:{e.event_specific_data.check_name}": (
            e.event_specific_data.passed
        )
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert checks["lamp_retrieval_evaluation:retrieval_metrics_valid"]
    assert (
        checks["baseline_retrievals:retrieved_docs_allowed"] and checks["clusterrag_retrievals:retrieved_docs_allowed"]
    )


def test_the_verdict_reads_the_materialized_tables(evaluated) -> None:
    """The verdict of `prag report` on the real store: one row for the task, the shipped method personalized, the
    gain cross-fitted over every dev sample, the verdict consistent with its interval."""
    from prag_models.evaluation.claims import PERSONALIZED
    from prag_models.evaluation.verdict import KEEP, SHIP, WORSE, verdicts_from_store

    con, _ = evaluated
    table = verdicts_from_store(con)
    assert table["task"].tolist() == [TASK]
    row = table.iloc[0]
    assert set(row["fold_methods"].split(" / ")) <= set(PERSONALIZED) and row["metric"] == "ndcg@2"
    assert row["n_samples"] == 24 and (row["method"] in PERSONALIZED or row["method"].startswith("no single method"))
    own = row["own_gain_low"] > 0  # over the own profile (dense) too
    shown = row["gain_low"] > 0 and row["selection_p"] < 0.025  # the interval and the choosing procedure's test
    expected = (SHIP if own else "own profile suffices") if shown else WORSE if row["gain_high"] < 0 else KEEP
    assert row["verdict"] == expected and row["gain_low"] <= row["gain"] <= row["gain_high"]
