"""Exact inner-product search over unit vectors with FAISS (cosine similarity of normalised embeddings)."""

from __future__ import annotations

import numpy as np


def flat_index(vectors: np.ndarray):  # noqa: ANN201 - faiss.IndexFlatIP, imported lazily
    """A FAISS IndexFlatIP holding the given (n, d) float32 vectors."""
    import faiss

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    return index


def search(vectors: np.ndarray, queries: np.ndarray, k: int, index=None) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """(scores, rows) of the top-k vectors per query, each (n_queries, k); rows are -1 where fewer exist."""
    q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    if len(vectors) == 0 or len(q) == 0:
        return np.zeros((len(q), 0), dtype=np.float32), np.zeros((len(q), 0), dtype=np.int64)
    index = index if index is not None else flat_index(vectors)
    scores, rows = index.search(q, min(k, len(vectors)))
    return scores, rows.astype(np.int64)
