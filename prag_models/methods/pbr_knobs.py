"""PBR's knobs (docs/methods.md §4.7): θ and k2 of the P-Anchor graph and the three fusion weights, the folds
that keep a question's own person (or community) out of the search that ranks it, and PBR re-ranking on vectors
embedded once (:class:`PbrVectors`: a trial re-ranks every question in milliseconds). The search itself is
prag_models.evaluation.pbr_tuning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prag_models.config.settings import PbrSettings
from prag_models.data.personabench import RetrievalQuestion, community_of
from prag_models.methods.pbr import anchor_vector, faiss_top_k, fusion_weights_of, pbr_query_vectors
from prag_models.metrics.retrieval import score_ranking

#: PBR's knobs (``pbr.<field>``) and the values the search may choose from; the authors' settings (θ = 0.5, k2 = 5,
#: every weight 1) are among them and are always scored first.
PBR_KNOB_SPACE: dict[str, tuple[Any, ...]] = {
    "pbr.theta": (0.3, 0.4, 0.5, 0.6, 0.75, 0.9),
    "pbr.k2": (2, 3, 5, 10, 20),
    "pbr.anchor_weight": (0.0, 0.5, 1.0, 2.0),
    "pbr.utterance_weight": (0.0, 0.5, 1.0, 2.0),
    "pbr.reasoning_weight": (0.5, 1.0, 2.0, 4.0),
}
#: The metric the search maximises: NDCG@5, PersonaBench's N@5 (best combination of gold lists).
PRIMARY = ("ndcg", 5)
ALL_FOLDS = "all"  # the fold name of the values tuned on every question (what a new community would use)
DEFAULT_METHOD = "pbr@default"  # the authors' settings, kept as their own row of the evaluation
TUNED_COLUMNS = ["dataset", "fold", "knob", "value", "default_value", "score", "default_score", "metric",
                 "n_trials", "n_questions", "held_out"]  # fmt: skip


@dataclass
class PbrVectors:
    """What ranking a question with PBR needs, embedded once: each user's segment vectors and ids, each question's
    vector and its P-PRF vectors (f_avg, r)."""

    questions: list[RetrievalQuestion]
    docs: Mapping[str, np.ndarray]
    ids: Mapping[str, list[str]]
    query: Mapping[str, np.ndarray]
    prf: Mapping[str, tuple[np.ndarray, np.ndarray]]
    _anchors: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)

    def anchor(self, user: str, settings: PbrSettings) -> np.ndarray:
        """The user's P-Anchor g under these graph settings (computed once per user and setting)."""
        key = (user, settings.theta, settings.k2, settings.damping, settings.pagerank_iters, settings.pagerank_tol)
        if key not in self._anchors:
            self._anchors[key] = anchor_vector(self.docs[user], settings)[0]
        return self._anchors[key]

    def rank(self, q: RetrievalQuestion, settings: PbrSettings) -> list[str]:
        """The question's top ``settings.top_k`` segment ids by PBR with these settings (as retrieval_runs ranks)."""
        f_avg, r = self.prf[q.q_id]
        vector = pbr_query_vectors(self.query[q.q_id], self.anchor(q.user, settings), f_avg, r, ["pbr"],
                                   *fusion_weights_of(settings))["pbr"]  # fmt: skip
        top = faiss_top_k(self.docs[q.user], vector, settings.top_k)[0]
        return [self.ids[q.user][i] for i in top if i >= 0]

    def scores(self, questions: Sequence[RetrievalQuestion], settings: PbrSettings) -> np.ndarray:
        """The primary metric of each question ranked with these settings."""
        return np.array([score_ranking(self.rank(q, settings), q.gold_sets, [PRIMARY[1]])[PRIMARY]
                         for q in questions], dtype=float)  # fmt: skip


def with_pbr_knobs(settings: PbrSettings, values: Mapping[str, Any]) -> PbrSettings:
    """PBR settings with the given ``pbr.<field>`` values."""
    return settings.model_copy(update={knob.split(".", 1)[1]: value for knob, value in values.items()})


def fold_of(questions: Sequence[RetrievalQuestion], n_folds: int) -> dict[str, int]:
    """q_id -> fold. The unit held out together is the community when the questions come from several PersonaBench
    communities, else the person (LongMemEval: each question is its own person); units go to folds in sorted order,
    round robin, at most ``n_folds`` folds."""
    communities = {community_of(q.q_id) for q in questions if "/" in q.q_id}
    unit = {q.q_id: (community_of(q.q_id) if len(communities) > 1 else q.user) for q in questions}
    units = sorted(set(unit.values()))
    folds = max(1, min(n_folds, len(units)))
    number = {u: i % folds for i, u in enumerate(units)}
    return {q_id: number[u] for q_id, u in unit.items()}


def knob_values_of(settings: PbrSettings) -> dict[str, Any]:
    """The value of every PBR knob in these settings."""
    return {knob: getattr(settings, knob.split(".", 1)[1]) for knob in PBR_KNOB_SPACE}
