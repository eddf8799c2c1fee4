"""The CFRAG retrieval methods: full CFRAG and the ablations of docs/methods.md §2.8, and the final cut."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prag_models.config.settings import Settings
from prag_models.methods.profiles import ProfileIndex, Retrieved


@dataclass(frozen=True)
class Variant:
    """One CFRAG retrieval method: whose docs, how candidates are scored, how the final list is chosen (§2.8)."""

    method: str
    users: str  # encoder: top-m by the CFRAG user encoder | own: only the user | mean: top-m by mean doc embeddings
    retriever: str  # trained: S with the trained W | base: cos(q, d) | no_sud: α = 0
    # reranker | reranker_no_eu: reranker trained without e_u | initial: the reranker untrained, i.e. the first
    # stage's score (its residual correction starts at zero) | none: top final_k by retriever score
    reranker: str


#: Full CFRAG and the ablations of paper Table 3. With the frozen text encoders used here (E_q, E_d are the
#: embedder), α = 0 leaves S = cos(q, d): ``cfrag_no_sud`` retrieves exactly what ``cfrag_no_retriever_tuning`` does.
VARIANTS: tuple[Variant, ...] = (
    Variant("cfrag", "encoder", "trained", "reranker"),
    Variant("cfrag_no_user_retrieval", "own", "trained", "reranker"),
    Variant("cfrag_mean_user_emb", "mean", "trained", "reranker"),
    Variant("cfrag_no_retriever_tuning", "encoder", "base", "reranker"),
    Variant("cfrag_no_sud", "encoder", "no_sud", "reranker"),
    Variant("cfrag_no_reranker_tuning", "encoder", "trained", "initial"),
    Variant("cfrag_no_reranker_eu", "encoder", "trained", "reranker_no_eu"),
)


CFRAG_METHODS: tuple[str, ...] = tuple(v.method for v in VARIANTS)
#: Full CFRAG with the champion bundle, beside the challenger's rows when the two differ (the promotion evidence).
CHAMPION_METHOD = "cfrag@champion"


def final_k(settings: Settings) -> int:
    """Documents per prompt after reranking: ``cfrag.final_k``, or ``retrieval.k`` when it is 0."""
    return settings.cfrag.final_k or settings.retrieval.k


def top_final(candidates: Sequence[Retrieved], scores: np.ndarray, k: int, index: ProfileIndex) -> list[Retrieved]:
    """The k candidates with the highest scores, one per text of the index (ties keep candidate order), carrying
    those scores."""
    order = np.argsort(-np.asarray(scores, dtype=np.float32), kind="stable")
    order = order[index.distinct([candidates[i].row for i in order], k)]
    return [
        Retrieved(candidates[i].row, candidates[i].doc_id, candidates[i].source_user_id, float(scores[i]))
        for i in order
    ]
