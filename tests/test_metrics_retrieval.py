"""Retrieval metrics (docs/methods.md §4.5) against hand-computed values, multiple gold answers included."""

from __future__ import annotations

import math

import pytest

from prag_models.metrics.retrieval import (
    gold_combinations,
    ndcg_at_k,
    recall_any_at_k,
    recall_at_k,
    score_ranking,
)

L3 = 1 / math.log2(3)  # gain at rank 2
L6 = 1 / math.log2(6)  # gain at rank 5


def test_single_list_metrics() -> None:
    ranked = ["x", "b", "y", "a", "z"]
    assert recall_at_k(ranked, {"a", "b"}, 2) == 0.5
    assert recall_at_k(ranked, {"a", "b"}, 4) == 1.0
    assert recall_any_at_k(ranked, {"a", "b"}, 1) == 0.0
    assert recall_any_at_k(ranked, {"a", "b"}, 2) == 1.0
    # hits at ranks 2 and 4; ideal: ranks 1 and 2
    assert ndcg_at_k(ranked, {"a", "b"}, 5) == pytest.approx((L3 + 1 / math.log2(5)) / (1 + L3))
    assert ndcg_at_k(ranked, {"b"}, 1) == 0.0
    assert ndcg_at_k(ranked, set(), 5) == 0.0 and recall_at_k(ranked, set(), 5) == 0.0


def test_ideal_dcg_is_capped_at_k() -> None:
    # 3 gold ids, k = 1: ideal is one hit at rank 1
    assert ndcg_at_k(["a", "x"], {"a", "b", "c"}, 1) == 1.0


def test_gold_combinations_product_with_duplicates_merged() -> None:
    combos = gold_combinations([["a"], ["b", "z"]])
    assert combos == [frozenset({"a", "b"}), frozenset({"a", "z"})]
    assert gold_combinations([["a"], ["a", "b"]]) == [frozenset({"a"}), frozenset({"a", "b"})]
    assert gold_combinations([]) == []


def test_two_gold_answers_best_combination() -> None:
    # answers: A supported by a; B supported by b or z. Ranked: a@1, b@3.
    scores = score_ranking(["a", "x", "b", "y", "c"], [["a"], ["b", "z"]], ks=(1, 3, 5))
    # k=1: {a,b} recall .5, NDCG = 1/1 (ideal for min(2,1) = 1 hit)
    assert scores[("recall", 1)] == 0.5
    assert scores[("ndcg", 1)] == 1.0
    # k=3 and 5: {a,b} recall 1, NDCG = (1 + 1/log2 4) / (1 + 1/log2 3)
    for k in (3, 5):
        assert scores[("recall", k)] == 1.0
        assert scores[("ndcg", k)] == pytest.approx(1.5 / (1 + L3))
        assert scores[("recall_any", k)] == 1.0


def test_best_combination_beats_worse_choice() -> None:
    # B's first id (z) is not retrieved, its second (b) is at rank 5: the best combination uses b.
    scores = score_ranking(["a", "x", "y", "w", "b"], [["a"], ["z", "b"]], ks=(5,))
    assert scores[("recall", 5)] == 1.0
    assert scores[("ndcg", 5)] == pytest.approx((1 + L6) / (1 + L3))


def test_three_answers_partial_recall() -> None:
    # answers A:{a}, B:{b1,b2}, C:{c}; retrieved b2@1, c@2 -> best combination {a,b2,c}: 2 of 3
    scores = score_ranking(["b2", "c", "x"], [["a"], ["b1", "b2"], ["c"]], ks=(3,))
    assert scores[("recall", 3)] == pytest.approx(2 / 3)
    assert scores[("ndcg", 3)] == pytest.approx((1 + L3) / (1 + L3 + 0.5))


def test_longmemeval_style_gold_is_plain_binary_ndcg() -> None:
    # every gold session its own list -> one combination {s1, s2}
    scores = score_ranking(["x", "s2", "y", "s1"], [["s1"], ["s2"]], ks=(3,))
    assert scores[("recall_any", 3)] == 1.0
    assert scores[("recall", 3)] == 0.5
    assert scores[("ndcg", 3)] == pytest.approx(L3 / (1 + L3))


def test_single_answer_with_alternatives_is_hit_any() -> None:
    scores = score_ranking(["x", "y", "s9"], [["s1", "s9"]], ks=(1, 3))
    assert scores[("recall", 1)] == 0.0 and scores[("recall", 3)] == 1.0
    assert scores[("ndcg", 3)] == pytest.approx(0.5)  # hit at rank 3, ideal one hit at rank 1


def test_no_gold_scores_zero() -> None:
    scores = score_ranking(["a"], [], ks=(1,))
    assert scores == {("recall", 1): 0.0, ("ndcg", 1): 0.0, ("recall_any", 1): 0.0}


def test_combination_explosion_is_refused() -> None:
    with pytest.raises(ValueError, match="combinations"):
        gold_combinations([[f"{i}-{j}" for j in range(20)] for i in range(5)])
