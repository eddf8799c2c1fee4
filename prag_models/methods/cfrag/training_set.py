"""CFRAG training sets (docs/methods.md §2.6–2.7): labelled candidate lists as tensors for the retriever and the
reranker, and a new reranker."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from prag_models.config.settings import CfragSettings
from prag_models.methods.profiles import ProfileIndex, Retrieved


@dataclass
class TrainingSet:
    """Feedback-labelled candidate lists of the training samples, padded to the longest list."""

    sample_ids: list[str]
    user_ids: list[str]
    queries: np.ndarray  # (n, d)
    rows: list[list[int]]  # candidate rows of the profile index per sample
    docs: np.ndarray  # (n, C, d)
    mask: np.ndarray  # (n, C) bool
    user_emb: np.ndarray  # (n, du) e_u of the querying user
    teacher: np.ndarray  # (n, C) feedback scores, 0 where padded


def training_set(
    index: ProfileIndex,
    samples: pd.DataFrame,
    candidates: Mapping[str, Sequence[Retrieved]],
    labels: pd.DataFrame,
    user_emb: Mapping[str, np.ndarray],
) -> TrainingSet:
    """Join each sample's candidates with their feedback scores (labels: sample_id, doc_id, source_user_id, score).

    ``samples`` has sample_id, user_id and the query vector ``embedding``; candidates without a label are dropped,
    samples without any labelled candidate are skipped.
    """
    score = {(r.sample_id, r.source_user_id, r.doc_id): float(r.score) for r in labels.itertuples(index=False)}
    kept: list[tuple[str, str, np.ndarray, list[int], list[float]]] = []
    for s in samples.itertuples(index=False):
        rows, scores = [], []
        for c in candidates.get(s.sample_id, []):
            key = (s.sample_id, c.source_user_id, c.doc_id)
            if key in score:
                rows.append(c.row)
                scores.append(score[key])
        if rows:
            kept.append((s.sample_id, s.user_id, np.asarray(s.embedding, dtype=np.float32), rows, scores))
    dim = index.vectors.shape[1]
    width = max((len(k[3]) for k in kept), default=0)
    du = len(next(iter(user_emb.values()))) if user_emb else dim
    docs = np.zeros((len(kept), width, dim), dtype=np.float32)
    mask = np.zeros((len(kept), width), dtype=bool)
    teacher = np.zeros((len(kept), width), dtype=np.float32)
    for i, (_, _, _, rows, scores) in enumerate(kept):
        docs[i, : len(rows)] = index.vectors[rows]
        mask[i, : len(rows)] = True
        teacher[i, : len(rows)] = scores
    return TrainingSet(
        sample_ids=[k[0] for k in kept],
        user_ids=[k[1] for k in kept],
        queries=np.stack([k[2] for k in kept]) if kept else np.zeros((0, dim), dtype=np.float32),
        rows=[k[3] for k in kept],
        docs=docs,
        mask=mask,
        user_emb=np.stack([np.asarray(user_emb[k[1]], dtype=np.float32) for k in kept])
        if kept
        else np.zeros((0, du), dtype=np.float32),
        teacher=teacher,
    )


def concat_sets(a: TrainingSet, b: TrainingSet) -> TrainingSet:
    """The samples of a, then those of b (candidate lists padded to the wider of the two)."""
    if not b.sample_ids:
        return a
    width = max(a.docs.shape[1], b.docs.shape[1])

    def pad(x: np.ndarray) -> np.ndarray:
        return np.pad(x, [(0, 0), (0, width - x.shape[1])] + [(0, 0)] * (x.ndim - 2))

    return TrainingSet(
        sample_ids=[*a.sample_ids, *b.sample_ids], user_ids=[*a.user_ids, *b.user_ids],
        queries=np.concatenate([a.queries, b.queries]), rows=[*a.rows, *b.rows],
        docs=np.concatenate([pad(a.docs), pad(b.docs)]), mask=np.concatenate([pad(a.mask), pad(b.mask)]),
        user_emb=np.concatenate([a.user_emb, b.user_emb]), teacher=np.concatenate([pad(a.teacher), pad(b.teacher)]),
    )  # fmt: skip


def rerank_samples(ts: TrainingSet, query_texts: Mapping[str, str], doc_texts: Sequence[str]) -> list:
    """The reranker's training samples: (query text, candidate doc texts, feedback scores, e_u) per sample."""
    from prag_models.methods.cfrag.reranker import RerankSample

    return [
        RerankSample(
            query=query_texts[sid],
            candidates=[doc_texts[r] for r in rows],
            teacher_scores=[float(t) for t in ts.teacher[i, : len(rows)]],
            user_embedding=ts.user_emb[i],
            base_scores=[float(b) for b in ts.docs[i, : len(rows)] @ ts.queries[i]],
            doc_vectors=np.asarray(ts.docs[i, : len(rows)], dtype=np.float32),
        )
        for i, (sid, rows) in enumerate(zip(ts.sample_ids, ts.rows, strict=True))
    ]


def new_reranker(settings: CfragSettings, user_dim: int, doc_dim: int = 0) -> Any:
    """A fresh reranker (``build_reranker``) cut to its first ``reranker_layers`` Transformer layers (0 = all).

    The cut is saved with the model (the encoder config's ``num_hidden_layers``), so ``load_model`` rebuilds it.
    """
    from prag_models.methods.cfrag.reranker import build_reranker

    model = build_reranker(settings, user_dim, doc_dim)
    keep = settings.reranker_layers
    layers = getattr(getattr(model.encoder, "encoder", None), "layer", None)
    if keep > 0:
        if layers is None:
            raise ValueError(f"{settings.reranker_model}: cannot cut layers of {type(model.encoder).__name__}")
        if keep < len(layers):
            model.encoder.encoder.layer = layers[:keep]
            model.encoder.config.num_hidden_layers = keep
    return model
