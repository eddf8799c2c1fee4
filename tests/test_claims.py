"""The seeds' claims as honest tallies (evaluation/claims.py): one row per distinct comparison, "≥" claims that are
only not reversed counted apart from "holds", identical methods said to be identical, Holm over each family."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
from statsmodels.stats.multitest import multipletests

from prag_models.evaluation.claims import (
    HOLDS,
    NOT_REVERSED,
    NOT_SHOWN,
    Claim,
    check_claims,
    claims_from_store,
    claims_markdown,
    with_holm,
)

ROOT = Path(__file__).resolve().parent.parent


def _scores(values: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.DataFrame(
        [(m, f"s{i}", float(v)) for m, vs in values.items() for i, v in enumerate(vs)],
        columns=["method", "sample_id", "value"],
    )


def _world(n: int = 60, seed: int = 0) -> dict[str, np.ndarray]:
    """dense = ClusterRAG user-only = CFRAG w/o user retrieval (the same retrieval), trained CFRAG = untrained."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.2, 0.6, n)
    cfrag = base + 0.2 + rng.normal(0, 0.1, n)
    return {
        "dense": base, "clusterrag_user_only": base, "cfrag_no_user_retrieval": base, "cfrag": cfrag,
        "cfrag_no_reranker_tuning": cfrag.copy(), "random": base - 0.1 + rng.normal(0, 0.3, n),
        "clusterrag_collaborative": base + rng.normal(0.0, 0.2, n), "clusterrag_hybrid": base + rng.normal(0, 0.2, n),
        "clusterrag_community": base + 0.25 + rng.normal(0, 0.05, n), "dense_global": base + 0.1,
    }  # fmt: skip


def test_claims_with_identical_differences_are_one_row() -> None:
    """cfrag > dense, cfrag > w/o user retrieval and cfrag > user-only are one comparison: one row, three claims."""
    table = check_claims(_scores(_world()), "ndcg@3")
    rows = table[table["claims"].str.contains("cfrag > dense", regex=False)]
    assert len(rows) == 1 and rows["n_claims"].iloc[0] == 3
    assert "cfrag > cfrag_no_user_retrieval" in rows["claims"].iloc[0]
    assert "cfrag > clusterrag_user_only" in rows["claims"].iloc[0]
    assert table["claims"].str.contains("cfrag > clusterrag_user_only", regex=False).sum() == 1
    # every row is a distinct comparison: no two rows with the same difference and interval
    assert not table.duplicated(["difference", "ci_low", "ci_high", "n_samples"]).any()


def test_an_at_least_claim_whose_interval_includes_zero_is_not_reversed_not_holds() -> None:
    rng = np.random.default_rng(1)
    base = rng.uniform(0, 1, 40)
    scores = _scores({"a": base, "b": base + rng.normal(-0.008, 0.1, 40), "c": base - 0.3})
    table = check_claims(scores, "m", claims=(Claim("t", "a", ">=", "b"), Claim("t", "a", ">=", "c")))
    got = dict(zip(table["claim"], table["verdict"], strict=True))
    assert got == {"a >= b": NOT_REVERSED, "a >= c": HOLDS}  # shown better: the ≥ claim holds


def test_trained_at_least_as_good_as_untrained_says_they_are_the_same_model() -> None:
    table = check_claims(_scores(_world()), "ndcg@3")
    row = table[table["claims"].str.contains("cfrag >= cfrag_no_reranker_tuning", regex=False)].iloc[0]
    assert row["identical"] and row["n_claims"] == 2 and row["p_value"] == 1.0  # CFRAG's > and prag's ≥ claim
    text = claims_markdown(with_holm(table.assign(task="LaMP-1", evaluation="retrieval")))
    assert "= identical (n=60)" in text


def test_holm_over_the_family_matches_statsmodels_and_only_weakens_verdicts() -> None:
    rng = np.random.default_rng(2)
    base = rng.uniform(0, 1, 30)
    methods = {"b": base, "strong": base + 0.3 + rng.normal(0, 0.05, 30)}
    for i in range(12):  # a family of weak effects: some raw "holds" by chance, Holm keeps none of them
        methods[f"w{i}"] = base + rng.normal(0.04, 0.1, 30)
    claims = tuple(Claim("t", m, ">", "b") for m in methods if m != "b")
    table = with_holm(check_claims(_scores(methods), "m", claims=claims).assign(task="T", evaluation="retrieval"))
    expected = multipletests(table["p_value"], alpha=0.05, method="holm")[1]
    assert np.allclose(table["p_holm"], expected) and (table["family_size"] == len(claims)).all()
    strong = table[table["claim"] == "strong > b"].iloc[0]
    assert strong["verdict"] == strong["holm_verdict"] == HOLDS
    raw_holds = table[(table["verdict"] == HOLDS) & (table["claim"] != "strong > b")]
    assert (raw_holds["holm_verdict"] == NOT_SHOWN).sum() >= 2  # raw "holds" the family-wise control does not keep
    assert set(table.loc[table["holm_verdict"] == HOLDS, "claim"]) <= set(table.loc[table["verdict"] == HOLDS, "claim"])


def write_store(path: Path, retrieval: dict[str, dict[str, np.ndarray]], llm: dict[str, dict[str, list]]) -> Path:
    """A DuckDB file with the tables the report reads: lamp_retrieval_evaluation, lamp_retrieval_sample_scores (ndcg@3
    per task) and, for the tasks in ``llm``, generations (method -> predictions; gold "g")."""
    from prag_models.evaluation.retrieval import summarize

    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path))
    scores = pd.concat([_scores(v).assign(task=t, metric="ndcg@3") for t, v in retrieval.items()], ignore_index=True)
    con.register("scores", scores)
    con.register("summary", pd.concat([summarize(t, scores[scores["task"] == t], "ndcg@3") for t in retrieval]))
    con.execute("CREATE TABLE lamp_retrieval_sample_scores AS SELECT * FROM scores")
    con.execute("CREATE TABLE lamp_retrieval_evaluation AS SELECT * FROM summary")
    if llm:
        rows = [(t, m, f"s{i}", p, "g") for t, ms in llm.items() for m, ps in ms.items() for i, p in enumerate(ps)]
        con.register("gens", pd.DataFrame(rows, columns=["task", "method", "sample_id", "prediction", "gold"]))
        con.execute("CREATE TABLE generations AS SELECT * FROM gens")
    con.close()
    return path


def test_claims_from_store_hold_one_family_per_evaluation(tmp_path) -> None:
    llm = {"LaMP-2": {"cfrag": ["g", "x"] * 4, "dense": ["x"] * 8, "random": ["g"] * 8}}
    path = write_store(tmp_path / "prag.duckdb", {"LaMP-1": _world(seed=3), "LaMP-2": _world(seed=4)}, llm)
    con = duckdb.connect(str(path), read_only=True)
    table = claims_from_store(con)
    only_one = claims_from_store(con, ["LaMP-1"])
    con.close()
    sizes = table.groupby("evaluation")["family_size"].unique()
    tested = table[~table["identical"].astype(bool) & (table["verdict"] != "no data")]  # what a Holm family tests
    assert sizes["retrieval"].tolist() == [len(tested[tested["evaluation"] == "retrieval"])]
    assert sizes["llm"].tolist() == [len(tested[tested["evaluation"] == "llm"])]
    assert len(tested) < len(table)  # the identical comparisons are rows, not hypotheses
    assert (table.loc[table["identical"].astype(bool), "p_holm"] == 1.0).all()
    assert set(only_one["task"]) == {"LaMP-1"} and only_one["family_size"].max() < sizes["retrieval"][0]


def test_seed_orderings_prints_distinct_comparisons_and_a_holm_column(tmp_path) -> None:
    write_store(tmp_path / "home" / "prag.duckdb", {"LaMP-1": _world(seed=5)}, {})
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "seed_orderings.py"), "--home", str(tmp_path / "home")],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    out = run.stdout
    assert "Holm" in out and "not reversed" in out and "distinct comparisons" in out and "nan" not in out
    assert out.count("cfrag > clusterrag_user_only") == 1  # merged into the cfrag > dense row, printed once
    long = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "seed_orderings.py"), "--home", str(tmp_path / "home"), "--long"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    assert "holm_verdict" in long and "p_holm" in long


def test_a_papers_claim_compares_its_methods_at_the_same_settings() -> None:
    """ClusterRAG's collaborative method tuned per task (far better than its untuned @default row) must not reverse
    the paper's "hybrid ≥ collaborative": the paper's claim reads the @default row, prag's own claims the tuned one;
    CFRAG's ablations share full CFRAG's tuned knobs and compare with it as they are."""
    world = _world()
    n = len(world["dense"])
    rng = np.random.default_rng(5)
    world["clusterrag_collaborative@default"] = world["clusterrag_collaborative"].copy()
    world["clusterrag_collaborative"] = world["dense"] + 0.4 + rng.normal(0, 0.02, n)  # tuned: far better
    world["clusterrag_hybrid"] = world["clusterrag_collaborative@default"] + 0.1 + rng.normal(0, 0.02, n)
    world["cfrag@default"] = world["cfrag"] - 0.3
    table = check_claims(_scores(world), "ndcg@3")
    paper = table[table["claims"].str.contains("ClusterRAG: clusterrag_hybrid >= ", regex=False)]
    assert paper["claims"].iloc[0] == "ClusterRAG: clusterrag_hybrid >= clusterrag_collaborative@default"
    assert paper["verdict"].iloc[0] == HOLDS
    own = table[table["claims"].str.contains("prag: clusterrag_collaborative > clusterrag_user_only", regex=False)]
    assert own["verdict"].iloc[0] == HOLDS and own["difference"].iloc[0] > 0.3
    ablation = table[table["claims"].str.contains("cfrag > cfrag_no_reranker_tuning", regex=False)]
    assert ablation["identical"].all()  # cfrag itself, not cfrag@default
    versus_dense = table[table["claims"].str.contains("CFRAG: cfrag@default > dense", regex=False)]
    assert len(versus_dense) == 1
