"""Retrieval evaluation of PBR, its ablations and the QE baselines on per-user corpora (docs/methods.md §4.5).

Each question retrieves from its own user's segments only. Segment, question and expansion texts are embedded once
(deduplicated) with the given embedder; the P-Anchor is computed once per user.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import pandas as pd

from prag_models.config.settings import PbrSettings
from prag_models.data.personabench import RetrievalQuestion, Segment
from prag_models.methods import query_expansion as qe
from prag_models.methods.pbr import (
    NEEDS_EXPANSION,
    PBR_METHODS,
    PbrExpansion,
    anchor_vector,
    faiss_top_k,
    fusion_weights_of,
    generate_expansions,
    pbr_query_vectors,
    top_k_prf,
    validate_pbr_settings,
)
from prag_models.metrics.intervals import estimate
from prag_models.metrics.retrieval import KS, score_ranking

RESULT_COLUMNS = ["dataset", "method", "category", "metric", "k", "value", "n_questions", "ci_low", "ci_high"]


class TextEmbedder(Protocol):
    """Anything with ``embed(texts) -> (n, dim) float32`` and ``dim`` (e.g. prag_models.text.embedder.Embedder)."""

    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts."""


class EmbeddingCache:
    """Wraps an embedder so that each distinct text is embedded once (reusable across evaluation runs)."""

    def __init__(self, embedder: TextEmbedder) -> None:
        self.embedder = embedder
        self.dim = int(embedder.dim)
        self.vectors: dict[str, np.ndarray] = {}

    @classmethod
    def of(cls, embedder: TextEmbedder) -> EmbeddingCache:
        """The embedder itself if it already is a cache, else a new cache around it."""
        return embedder if isinstance(embedder, EmbeddingCache) else cls(embedder)

    def add(self, texts: Sequence[str]) -> None:
        """Embed the texts not seen yet, in one batch."""
        new = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if new:
            for text, vec in zip(new, np.asarray(self.embedder.embed(new), dtype=np.float32), strict=True):
                self.vectors[text] = vec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Stacked embeddings of texts (embedding unseen ones first)."""
        self.add(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.vectors[t] for t in texts])

    __call__ = embed


def expansion_vectors(
    expansion: PbrExpansion | None, embed: Callable[[Sequence[str]], np.ndarray], dim: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(f_avg, r) of a P-PRF expansion (docs/methods.md §4.1): the mean pseudo-utterance vector and the reasoning
    vector, zeros for empty texts; (None, None) without an expansion."""
    if expansion is None:
        return None, None
    zero = np.zeros(dim, dtype=np.float32)
    utterances = [t for t in expansion.pseudo_utterances if t.strip()]
    f_avg = np.asarray(embed(utterances), dtype=np.float32).mean(axis=0) if utterances else zero
    r = np.asarray(embed([expansion.reasoning]), dtype=np.float32)[0] if expansion.reasoning.strip() else zero
    return f_avg, r


def _check_inputs(
    questions: Sequence[RetrievalQuestion],
    segments_by_user: Mapping[str, Sequence[Segment]],
    methods: Sequence[str],
    expansions: Mapping[str, PbrExpansion],
    qe_expansions: Mapping[str, Mapping[str, str]],
) -> None:
    """Raise ValueError for unknown methods, users without segments and missing expansions."""
    for method in methods:
        if method not in PBR_METHODS and method not in qe.QE_METHODS:
            raise ValueError(f"unknown method {method!r}; known: {list(PBR_METHODS) + list(qe.QE_METHODS)}")
    for q in questions:
        if not segments_by_user.get(q.user):
            raise ValueError(f"question {q.q_id!r}: user {q.user!r} has no segments")
        for method in methods:
            if method in NEEDS_EXPANSION and q.q_id not in expansions:
                raise ValueError(f"method {method!r} needs a P-PRF expansion for question {q.q_id!r}")
            if method in qe.QE_METHODS and q.q_id not in qe_expansions.get(method, {}):
                raise ValueError(f"method {method!r} needs an expansion text for question {q.q_id!r}")


def retrieve_rankings(
    questions: Sequence[RetrievalQuestion],
    segments_by_user: Mapping[str, Sequence[Segment]],
    embedder: TextEmbedder,
    methods: Sequence[str],
    expansions: Mapping[str, PbrExpansion],
    settings: PbrSettings,
    qe_expansions: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[tuple[str, str], list[str]]:
    """{(method, q_id): ranked segment ids (top settings.top_k)} for every question and method."""
    qe_expansions = qe_expansions or {}
    validate_pbr_settings(settings)
    _check_inputs(questions, segments_by_user, methods, expansions, qe_expansions)
    cache = EmbeddingCache.of(embedder)
    users = list(dict.fromkeys(q.user for q in questions))
    cache.add([s.text for u in users for s in segments_by_user[u]])
    cache.add([q.question for q in questions])
    wanted = [e for q in questions if (e := expansions.get(q.q_id)) and any(m in NEEDS_EXPANSION for m in methods)]
    cache.add([t for e in wanted for t in (*e.pseudo_utterances, e.reasoning) if t.strip()])
    doc_emb = {u: cache([s.text for s in segments_by_user[u]]) for u in users}
    anchors = {u: anchor_vector(doc_emb[u], settings)[0] for u in users if any(m.startswith("pbr") for m in methods)}
    rankings: dict[tuple[str, str], list[str]] = {}
    for q in questions:
        qv = cache([q.question])[0]
        pbr_methods = [m for m in methods if m in PBR_METHODS]
        needed = any(m in NEEDS_EXPANSION for m in pbr_methods)
        f_avg, r = expansion_vectors(expansions[q.q_id] if needed else None, cache, embedder.dim)
        g = anchors.get(q.user, np.zeros(embedder.dim, dtype=np.float32))
        vectors = pbr_query_vectors(qv, g, f_avg, r, pbr_methods, *fusion_weights_of(settings))
        for m in methods:
            if m in qe.QE_METHODS:
                vectors[m] = qe.qe_query_vector(cache, m, q.question, qe_expansions[m][q.q_id])
        ids = [s.segment_id for s in segments_by_user[q.user]]
        ordered = list(methods)
        top = faiss_top_k(doc_emb[q.user], np.stack([vectors[m] for m in ordered]), settings.top_k)
        for m, row in zip(ordered, top, strict=True):
            rankings[(m, q.q_id)] = [ids[i] for i in row if i >= 0]
    return rankings


def per_question_scores(
    questions: Sequence[RetrievalQuestion],
    rankings: Mapping[tuple[str, str], Sequence[str]],
    methods: Sequence[str],
    ks: Sequence[int] = KS,
) -> pd.DataFrame:
    """Long table (dataset, method, category, q_id, metric, k, value) of per-question scores."""
    rows: list[dict[str, Any]] = []
    for q in questions:
        for m in methods:
            for (metric, k), value in score_ranking(rankings[(m, q.q_id)], q.gold_sets, ks).items():
                rows.append(
                    {
                        "dataset": q.dataset,
                        "method": m,
                        "category": q.category,
                        "q_id": q.q_id,
                        "metric": metric,
                        "k": k,
                        "value": value,
                    }
                )
    return pd.DataFrame(rows, columns=["dataset", "method", "category", "q_id", "metric", "k", "value"])


def aggregate_scores(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean per (dataset, method, category, metric, k) plus an "Overall" category over all questions."""
    if scores.empty:
        return pd.DataFrame(columns=RESULT_COLUMNS)
    keys = ["dataset", "method", "metric", "k"]
    per_cat = scores.groupby([*keys, "category"], sort=False)["value"].agg(["mean", "count"]).reset_index()
    overall = scores.groupby(keys, sort=False)["value"].agg(["mean", "count"]).reset_index()
    overall["category"] = "Overall"
    out = pd.concat([per_cat, overall], ignore_index=True)
    out = out.rename(columns={"mean": "value", "count": "n_questions"})
    bounds = {}  # 95 % bootstrap interval of each mean over its questions (docs/methods.md §6.3)
    for key, group in scores.groupby([*keys, "category"], sort=False)["value"]:
        e = estimate(group.to_numpy())
        bounds[key] = (e.low, e.high)
    for key, group in scores.groupby(keys, sort=False)["value"]:
        e = estimate(group.to_numpy())
        bounds[(*key, "Overall")] = (e.low, e.high)
    ci = [bounds[(r.dataset, r.method, r.metric, r.k, r.category)] for r in out.itertuples()]
    out["ci_low"], out["ci_high"] = [c[0] for c in ci], [c[1] for c in ci]
    return out[RESULT_COLUMNS].reset_index(drop=True)


def evaluate_retrieval(
    questions: Sequence[RetrievalQuestion],
    segments_by_user: Mapping[str, Sequence[Segment]],
    embedder: TextEmbedder,
    methods: Sequence[str],
    expansions: Mapping[str, PbrExpansion],
    settings: PbrSettings,
    qe_expansions: Mapping[str, Mapping[str, str]] | None = None,
    ks: Sequence[int] = KS,
) -> pd.DataFrame:
    """Rows (dataset, method, category, metric, k, value, n_questions), "Overall" included (docs/methods.md §4.5).

    metric ``recall`` is the best-combination Recall@K (PersonaBench's R@K), ``recall_any`` LongMemEval's
    recall_any@K, ``ndcg`` the best-combination binary NDCG@K. K values above ``settings.top_k`` are dropped.
    """
    ks = [k for k in ks if k <= settings.top_k]
    rankings = retrieve_rankings(questions, segments_by_user, embedder, methods, expansions, settings, qe_expansions)
    return aggregate_scores(per_question_scores(questions, rankings, methods, ks))


def prf_histories(
    questions: Sequence[RetrievalQuestion],
    segments_by_user: Mapping[str, Sequence[Segment]],
    embedder: TextEmbedder,
    k: int,
) -> list[tuple[str, str, list[str]]]:
    """(q_id, question, texts of the top-k docs by cosine) per question: H_q of P-PRF, or ThinkQE's passages."""
    cache = EmbeddingCache.of(embedder)
    items = []
    for q in questions:
        segs = segments_by_user[q.user]
        emb = cache([s.text for s in segs])
        idx = top_k_prf(cache([q.question])[0], emb, k)
        items.append((q.q_id, q.question, [segs[i].text for i in idx]))
    return items


def build_pbr_expansions(
    generator: Any,
    questions: Sequence[RetrievalQuestion],
    segments_by_user: Mapping[str, Sequence[Segment]],
    embedder: TextEmbedder,
    settings: PbrSettings,
    max_new_tokens: int = 512,
    max_history_tokens: int | None = None,
) -> dict[str, PbrExpansion]:
    """Generate P-PRF expansions with the LLM from each question's top-k1 docs (expansion_source = generate)."""
    items = prf_histories(questions, segments_by_user, embedder, settings.k1)
    return generate_expansions(generator, items, settings.num_pseudo, max_new_tokens, max_history_tokens)
