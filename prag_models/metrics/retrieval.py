"""Retrieval metrics with binary relevance (docs/methods.md §4.5): Recall@K, recall_any@K and NDCG@K.

A question may have several gold answers, each supported by a list of segment ids (any one of them suffices).
It is scored on the best combination of one segment per answer (the Cartesian product of the lists), as in
PersonaBench's evaluation: Recall@K and NDCG@K are each the maximum over the combinations. With a single answer
whose list holds several ids this is "hit any of them"; with one id per list (LongMemEval: every gold session its
own list) there is one combination holding all gold ids, and NDCG@K is the usual binary NDCG.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

KS: tuple[int, ...] = (1, 3, 5, 10)
METRIC_NAMES: tuple[str, ...] = ("recall", "recall_any", "ndcg")
#: Guard against a combinatorial explosion of gold combinations.
MAX_COMBINATIONS = 100_000


def recall_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Share of the gold ids found in the top k (0 when there is no gold)."""
    gold_set = set(gold)
    if not gold_set:
        return 0.0
    return len(gold_set.intersection(ranked[:k])) / len(gold_set)


def recall_any_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """1 if any gold id is in the top k, else 0."""
    return 1.0 if set(gold).intersection(ranked[:k]) else 0.0


def ndcg_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Binary NDCG@k: sum of 1/log2(rank+1) over gold hits, divided by the ideal for min(|gold|, k) hits."""
    gold_set = set(gold)
    dcg = sum(1.0 / math.log2(i + 2) for i, doc in enumerate(ranked[:k]) if doc in gold_set)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold_set), k)))
    return dcg / ideal if ideal > 0 else 0.0


def gold_combinations(gold_sets: Sequence[Sequence[str]]) -> list[frozenset[str]]:
    """Distinct sets made of one id from each gold list (the Cartesian product, duplicates merged)."""
    lists = [list(dict.fromkeys(g)) for g in gold_sets if len(g) > 0]
    if not lists:
        return []
    total = math.prod(len(g) for g in lists)
    if total > MAX_COMBINATIONS:
        raise ValueError(f"{total} gold combinations exceed the limit of {MAX_COMBINATIONS}")
    return list(dict.fromkeys(frozenset(c) for c in itertools.product(*lists)))


def score_ranking(
    ranked: Sequence[str], gold_sets: Sequence[Sequence[str]], ks: Sequence[int] = KS
) -> dict[tuple[str, int], float]:
    """{(metric, k): value} for one question: best-combination recall and NDCG, and recall_any over all gold ids."""
    ranked = list(ranked)
    combos = gold_combinations(gold_sets)
    all_gold = {doc for g in gold_sets for doc in g}
    out: dict[tuple[str, int], float] = {}
    for k in ks:
        out[("recall", k)] = max((recall_at_k(ranked, c, k) for c in combos), default=0.0)
        out[("ndcg", k)] = max((ndcg_at_k(ranked, c, k) for c in combos), default=0.0)
        out[("recall_any", k)] = recall_any_at_k(ranked, all_gold, k)
    return out
