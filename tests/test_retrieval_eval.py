"""LLM-free retrieval evaluation, community-wide retrieval and the seed claims, on hand-computed inputs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from prag_models.evaluation import retrieval as rev
from prag_models.evaluation.claims import HOLDS, NOT_SHOWN, REVERSED, Claim, best_personalized, check_claims, fold_of
from prag_models.methods.baselines import retrieve_dense_global
from prag_models.methods.community import CommunityRetriever
from prag_models.methods.profiles import ProfileIndex


def _runs(rows: list[tuple[str, str, int, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["method", "sample_id", "rank", "doc_id"])


def test_relevance_metrics_hand_computed() -> None:
    runs = _runs([("m", "s1", 1, "a"), ("m", "s1", 2, "x"), ("m", "s1", 3, "b"), ("m", "s2", 1, "y")])
    scores = rev.per_sample_scores(runs, {"m": ["s1", "s2", "s3"]}, 3, relevant={"s1": {"a", "b"}, "s2": {"z"}})
    got = {(r.sample_id, r.metric): r.value for r in scores.itertuples()}
    assert got[("s1", "recall@3")] == 1.0  # 2 hits of min(3, 2) relevant
    assert got[("s1", "mrr@3")] == 1.0
    ideal = 1 + 1 / math.log2(3)
    assert got[("s1", "ndcg@3")] == pytest.approx((1 + 1 / math.log2(4)) / ideal)
    assert got[("s2", "recall@3")] == got[("s2", "ndcg@3")] == got[("s2", "mrr@3")] == 0.0
    assert got[("s3", "recall@3")] == 0.0  # asked but returned nothing: a miss, not dropped


def test_label_hit_counts_missing_documents_as_misses() -> None:
    runs = _runs([("m", "s1", 1, "a"), ("m", "s1", 2, "b")])
    scores = rev.per_sample_scores(runs, {"m": ["s1"]}, 3, None, {"a": "comedy", "b": "dark"}, {"s1": "comedy"})
    assert scores["metric"].tolist() == ["label_hit@3"] and scores["value"].tolist() == [pytest.approx(1 / 3)]


def test_summary_and_paired_comparison() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):
        rows += [("good", f"s{i}", "ndcg@3", float(rng.random() < 0.9)), ("random", f"s{i}", "ndcg@3", 0.0)]
        rows += [("same", f"s{i}", "ndcg@3", 0.0)]
    scores = pd.DataFrame(rows, columns=["method", "sample_id", "metric", "value"])
    summary = rev.summarize("LaMP-2", scores, "ndcg@3")
    good = summary[summary["method"] == "good"].iloc[0]
    assert good.n_samples == 40 and good.ci_low <= good.value <= good.ci_high and good.is_primary
    comp = rev.compare("LaMP-2", scores).set_index(["method", "baseline"])
    assert comp.loc[("good", "random"), "better"] and not comp.loc[("good", "random"), "worse"]
    same = comp.loc[("same", "random")]
    assert same.difference == same.ci_low == same.ci_high == 0.0 and not same.better and not same.worse
    assert "±" in rev.summary_markdown(summary, comp.reset_index())


def _index() -> ProfileIndex:
    """Two clusters of users; each user's docs point along its axis, plus one doc along the query axis."""
    vecs, users, ids = [], [], []
    axes = {"a1": 0, "a2": 0, "b1": 1, "b2": 1}
    for u, axis in axes.items():
        for j in range(2):
            v = np.zeros(4, dtype=np.float32)
            v[axis], v[2] = 1.0, 0.5 + 0.1 * j
            vecs.append(v / np.linalg.norm(v))
            users.append(u)
            ids.append(f"{u}-{j}")
    return ProfileIndex(ids, users, ids, np.stack(vecs), np.ones(len(ids), dtype=bool))


def test_community_retrieval_stays_in_the_cluster_and_prefers_close_users() -> None:
    index = _index()
    clusters = {"a1": 0, "a2": 0, "b1": 1, "b2": 1}
    z = {u: np.eye(4, dtype=np.float32)[0 if u.startswith("a") else 1] for u in clusters}
    retriever = CommunityRetriever(index, clusters, z, user_weight=0.5)
    found = retriever.retrieve("a1", np.array([0, 0, 1, 0], dtype=np.float32), 3)
    assert {r.source_user_id for r in found} <= {"a1", "a2"} and len(found) == 3
    assert retriever.members("b2") == ["b1", "b2"]
    top_n = CommunityRetriever(index, clusters, z, user_weight=0.5, top_n=1)
    assert top_n.members("b2")[0] == "b2"


def test_dense_global_searches_every_user() -> None:
    index = _index()
    found = retrieve_dense_global(index, ["a1"], np.array([[0, 1, 0, 0]], dtype=np.float32), 2)[0]
    assert {r.source_user_id for r in found} <= {"b1", "b2"} and len(found) == 2


def _claim_scores(diffs: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [(m, f"s{i}", v) for m, values in diffs.items() for i, v in enumerate(values)],
        columns=["method", "sample_id", "value"],
    )


def test_claim_verdicts() -> None:
    scores = _claim_scores({"a": [1.0] * 30, "b": [0.0] * 30, "c": [0.0, 1.0] * 15})
    claims = (
        Claim("t", "a", ">", "b"),
        Claim("t", "b", ">", "a"),
        Claim("t", "c", ">", "c"),
        Claim("t", "b", ">=", "c"),
    )
    table = check_claims(scores, "m", claims=claims)
    got = dict(zip(table["claim"], table["verdict"], strict=True))
    assert got == {"a > b": HOLDS, "b > a": REVERSED, "c > c": NOT_SHOWN, "b >= c": REVERSED}


def test_claims_orient_lower_is_better_metrics() -> None:
    scores = _claim_scores({"a": [0.0] * 20, "b": [2.0] * 20})  # a has the smaller error
    table = check_claims(scores, "mae", higher_is_better=False, claims=(Claim("t", "a", ">", "b"),))
    assert table["verdict"].tolist() == [HOLDS] and table["difference"].tolist() == [2.0]


def test_intervals_disjoint_is_stricter_than_the_paired_verdict() -> None:
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 40)
    # a beats b by a small constant on every sample: the paired interval excludes 0, the separate intervals overlap
    scores = _claim_scores({"a": (base + 0.05).tolist(), "b": base.tolist(), "c": (base + 2.0).tolist()})
    table = check_claims(scores, "m", claims=(Claim("t", "a", ">", "b"), Claim("t", "c", ">", "b")))
    got = {c: (v, d) for c, v, d in table[["claim", "verdict", "intervals_disjoint"]].values}
    assert got == {"a > b": (HOLDS, False), "c > b": (HOLDS, True)}


def test_best_personalized_is_chosen_on_the_other_fold() -> None:
    ids = [f"s{i}" for i in range(40)]
    folds = [fold_of(s) for s in ids]
    assert 0 < sum(folds) < len(ids)
    # cfrag is perfect on fold 0 and useless on fold 1; pbr the reverse; each is the best on its own fold only
    rows = []
    for s, f in zip(ids, folds, strict=True):
        rows += [("cfrag", s, 1.0 if f == 0 else 0.0), ("pbr", s, 1.0 if f == 1 else 0.0), ("dense_global", s, 0.5)]
    scores = pd.DataFrame(rows, columns=["method", "sample_id", "value"])
    values, label = best_personalized(scores, higher_is_better=True)
    # the method chosen on the other fold scores 0 on each fold: cross-fitting does not reward luck
    assert set(label.split("/")) == {"cfrag", "pbr"} and values.sum() == 0.0 and len(values) == len(ids)
    table = check_claims(scores, "m", claims=(Claim("prag", "best personalized", ">", "dense_global"),))
    assert table["verdict"].tolist() == [REVERSED] and "cross-fitted" in table["claim"][0]


def test_label_hit_labels_for_lamp1_use_the_chosen_reference_title() -> None:
    text = 'For an author who has written the paper with the title "X", which reference is related? ' \
        'Just answer with [1] or [2] without explanation. [1]: "Dark matter maps" [2]: "Sourdough physics"'
    assert rev.gold_label("LaMP-1", text, "[2]") == "Sourdough physics"
    assert rev.gold_label("LaMP-1", "no references here", "[1]") is None
    assert rev.document_label("LaMP-1", {"title": " Sourdough physics ", "abstract": "…"}) == "Sourdough physics"
    assert (rev.document_label("LaMP-3", {"text": "ok", "score": 4}), rev.gold_label("LaMP-3", "", "4")) == ("4", "4")
    runs = pd.DataFrame(
        [("bm25", "s1", 1, "d1"), ("bm25", "s1", 2, "d2")], columns=["method", "sample_id", "rank", "doc_id"]
    )
    labels = {"d1": "Sourdough physics", "d2": "Dark matter maps"}
    scores = rev.per_sample_scores(runs, {"bm25": ["s1"]}, 2, None, labels, {"s1": "Sourdough physics"})
    assert scores["value"].tolist() == [0.5]
