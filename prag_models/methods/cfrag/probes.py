"""Checks of trained CFRAG models: the load-back probe (same scores after MLflow), the loss trend, one torch thread."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

#: Model kinds written to the ``cfrag_models`` table and registered in MLflow.
MODEL_KINDS: tuple[str, ...] = ("user_encoder", "retriever", "reranker", "reranker_no_eu")


#: Rows of a probe: how many users / queries and documents the load-back comparison scores.
PROBE_ROWS, PROBE_DOCS = 4, 6


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run torch ops on ``count`` intra-op threads (0: leave torch's count as it is), then restore the count."""
    import torch

    before = torch.get_num_threads()
    if count > 0:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def single_thread() -> Iterator[None]:
    """One intra-op thread, for the small inference passes (user vectors, serving) that share the cores with
    others: there thread synchronisation costs more than it gains."""
    with torch_threads(1):
        yield


def loss_trend(curve: Sequence[float]) -> tuple[float, float]:
    """(start, end) of a loss curve: means of its first and last max(1, min(5, n // 5)) steps (noise-robust)."""
    if not curve:
        return float("nan"), float("nan")
    width = max(1, min(5, len(curve) // 5))
    return float(np.mean(curve[:width])), float(np.mean(curve[-width:]))


@dataclass
class Probe:
    """Fixed inputs rebuilt from the tables to compare a trained model with its registered copy."""

    histories: list[list[int]]  # the first users' encoder histories
    queries: np.ndarray  # (p, d) query vectors of the first dev samples
    query_texts: list[str]
    user_emb: np.ndarray  # (p, du) CFRAG e_u of those samples' users (empty before user embeddings exist)
    doc_vectors: np.ndarray  # (PROBE_DOCS, d) the first documents of the profile index
    doc_texts: list[str]


def probe_scores(kind: str, model: object, probe: Probe) -> np.ndarray:
    """The scores (flattened) a model of the given kind gives on the probe inputs."""
    if kind == "user_encoder":
        from prag_models.methods.cfrag.user_encoder import encode_users

        return encode_users(model, probe.histories).ravel()  # type: ignore[arg-type]
    n, c = len(probe.queries), len(probe.doc_vectors)
    if kind == "retriever":
        from prag_models.methods.cfrag.retriever import retriever_scores

        docs = np.broadcast_to(probe.doc_vectors, (n, c, probe.doc_vectors.shape[1]))
        return retriever_scores(model, probe.queries, docs, probe.user_emb).ravel()  # type: ignore[arg-type]
    from prag_models.methods.cfrag.reranker import rerank_scores

    queries = [q for q in probe.query_texts for _ in range(c)]
    docs_t = [d for _ in probe.query_texts for d in probe.doc_texts]
    users = np.repeat(probe.user_emb, c, axis=0)
    base = (probe.queries @ probe.doc_vectors.T).ravel()
    docs_v = np.tile(probe.doc_vectors, (n, 1))
    return rerank_scores(model, queries, docs_t, users, base, doc_vectors=docs_v)  # type: ignore[arg-type]
