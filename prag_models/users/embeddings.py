"""Mean user embeddings z_u over profile documents, with the cold-start rule (docs/methods.md §3.1, §3.6)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise each row (zero rows stay zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(norms == 0, 1.0, norms)).astype(np.float32)


class UserMeans:
    """Running sums of users' normalised document vectors, fed chunk by chunk (memory: users × d, not documents)."""

    def __init__(self, user_ids: Sequence[str]) -> None:
        self.user_ids = list(user_ids)
        self.sums: np.ndarray | None = None
        self.counts = np.zeros(len(self.user_ids), dtype=np.int64)

    def add(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        """Add a chunk: rows[i] is the position in user_ids of the author of vectors[i]."""
        if self.sums is None:
            self.sums = np.zeros((len(self.user_ids), vectors.shape[1]), dtype=np.float64)
        rows = np.asarray(rows, dtype=np.int64)
        np.add.at(self.sums, rows, normalize_rows(vectors))
        self.counts += np.bincount(rows, minlength=len(self.user_ids))

    def result(
        self, cold_start_queries: Mapping[str, np.ndarray] | None = None, dim: int = 0
    ) -> tuple[np.ndarray, list[int], list[bool]]:
        """(vectors (n_users, d), document counts, cold-start flags); a user without documents gets its query vector."""
        if self.sums is None:
            width = dim or next((len(v) for v in (cold_start_queries or {}).values()), 0)
            self.sums = np.zeros((len(self.user_ids), width), dtype=np.float64)
        has_docs = self.counts > 0
        out = np.zeros(self.sums.shape, dtype=np.float32)
        out[has_docs] = self.sums[has_docs] / self.counts[has_docs, None]
        cold = [False] * len(self.user_ids)
        for i in np.flatnonzero(~has_docs):
            u = self.user_ids[i]
            if not cold_start_queries or u not in cold_start_queries:
                raise ValueError(f"user {u!r} has no profile documents and no query to fall back on (cold start)")
            out[i] = cold_start_queries[u]
            cold[i] = True
        return out, self.counts.tolist(), cold


def mean_user_embeddings(
    user_ids: Sequence[str],
    doc_users: Sequence[str],
    doc_vectors: np.ndarray,
    cold_start_queries: Mapping[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, list[int], list[bool]]:
    """Mean of each user's normalised doc vectors; a user without documents gets its query embedding.

    Returns (vectors (n_users, d), document counts, cold-start flags) in the order of user_ids.
    """
    index = {u: i for i, u in enumerate(user_ids)}
    means = UserMeans(user_ids)
    if len(doc_users):
        means.add(np.array([index[u] for u in doc_users], dtype=np.int64), doc_vectors)
    return means.result(cold_start_queries, dim=doc_vectors.shape[1] if doc_vectors.ndim == 2 else 0)
