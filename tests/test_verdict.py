"""Which method to ship per task (evaluation/verdict.py): the best personalized method against dense_global, its
gain cross-fitted, "ship" only when the paired 95 % interval is above 0."""

from __future__ import annotations

import numpy as np
import pandas as pd

from prag_models.evaluation.verdict import KEEP, SHIP, WORSE, llm_confirmation, task_verdict, verdicts_markdown


def _scores(values: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.DataFrame(
        [(m, f"s{i}", float(v)) for m, vs in values.items() for i, v in enumerate(vs)],
        columns=["method", "sample_id", "value"],
    )


def test_ship_only_when_the_cross_fitted_gain_is_shown() -> None:
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.6, 60)
    clear = task_verdict(_scores({"dense_global": base, "cfrag": base + 0.2, "clusterrag_community": base + 0.1}),
                         "ndcg@3")  # fmt: skip
    assert clear["verdict"] == SHIP and clear["method"] == "cfrag" and clear["n_samples"] == 60
    assert clear["gain_low"] > 0 and abs(clear["gain"] - 0.2) < 1e-9
    noise = rng.normal(0, 0.2, 60)
    tie = task_verdict(_scores({"dense_global": base, "cfrag": base + noise}), "ndcg@3")
    assert tie["verdict"] == KEEP and tie["gain_low"] < 0 < tie["gain_high"]
    worse = task_verdict(_scores({"dense_global": base + 0.3, "cfrag": base}), "ndcg@3")
    assert worse["verdict"] == WORSE and worse["gain_high"] < 0
    assert task_verdict(_scores({"cfrag": base}), "ndcg@3") is None  # no baseline: nothing to decide
    assert task_verdict(_scores({"dense_global": base, "bm25": base}), "ndcg@3") is None  # nothing personalized


def test_a_method_that_wins_by_luck_on_half_the_samples_is_not_shipped() -> None:
    """Each of two methods is perfect on a different half: the best mean exists, but chosen on one half it fails on
    the other, and the cross-fitted gain says so."""
    from prag_models.evaluation.claims import fold_of

    ids = [f"s{i}" for i in range(60)]
    rows = []
    for s in ids:
        f = fold_of(s)
        rows += [("cfrag", s, float(f == 0)), ("pbr", s, float(f == 1)), ("dense_global", s, 0.5)]
    verdict = task_verdict(pd.DataFrame(rows, columns=["method", "sample_id", "value"]), "ndcg@3")
    assert verdict["verdict"] == WORSE and verdict["gain"] == -0.5


def test_llm_confirmation_and_markdown() -> None:
    scores = _scores({"dense_global": np.array([0.0, 1.0, 0.0, 1.0]), "cfrag": np.array([1.0, 1.0, 0.0, 1.0])})
    llm = llm_confirmation(scores, "cfrag", "accuracy", True)
    assert llm["llm_n_samples"] == 4 and llm["llm_gain"] == 0.25
    assert llm_confirmation(scores, "pbr", "accuracy", True)["llm_n_samples"] == 0
    base = np.linspace(0.1, 0.5, 30)
    verdict = task_verdict(_scores({"dense_global": base, "cfrag": base + 0.2}), "ndcg@3")
    row = {"task": "LaMP-2", "evidence": "retrieval", **verdict, **llm}
    text = verdicts_markdown(pd.DataFrame([row]))
    assert "**ship**" in text and "| cfrag |" in text and "(n=4): not shown" in text and "| 30 |" in text
    assert "nothing to decide" in verdicts_markdown(pd.DataFrame())


def test_a_task_the_retrieval_evaluation_cannot_score_is_decided_on_the_llm_evaluation(tmp_path) -> None:
    """Real LaMP-4 files carry no relevance and no document labels: the verdict reads the LLM evaluation (a real
    DuckDB file with a generations table) and says that is its evidence."""
    import duckdb

    from prag_models.evaluation.verdict import verdicts_from_store, verdicts_markdown

    rows = []
    for i in range(24):
        gold = f"headline number {i} about rivers and bridges"
        rows += [("LaMP-4", "cfrag", f"s{i}", gold, gold), ("LaMP-4", "dense_global", f"s{i}", "something else", gold)]
    con = duckdb.connect(str(tmp_path / "prag.duckdb"))
    con.execute("CREATE TABLE generations (task VARCHAR, method VARCHAR, sample_id VARCHAR, prediction VARCHAR, "
                "gold VARCHAR)")  # fmt: skip
    con.executemany("INSERT INTO generations VALUES (?, ?, ?, ?, ?)", rows)
    table = verdicts_from_store(con)
    con.close()
    row = table.iloc[0]
    assert (row["task"], row["evidence"], row["method"], row["verdict"]) == ("LaMP-4", "LLM evaluation", "cfrag", SHIP)
    assert row["metric"] == "rouge1" and row["n_samples"] == 24 and row["gain_low"] > 0
    assert "| LaMP-4 | LLM evaluation | **ship** | cfrag |" in verdicts_markdown(table)
