"""Mean user embeddings z_u over profile documents, with the cold-start rule (docs/methods.md §3.1, §3.6)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise each row (zero rows stay zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def mean_user_embeddings(
    user_ids: Sequence[str],
    doc_users: Sequence[str],
    doc_vectors: np.ndarray,
    cold_start_queries: Mapping[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, list[int], list[bool]]:
    """Mean of each user's normalised doc vectors; a user without documents gets its query embedding.

    Returns (vectors (n_users, d), document counts, cold-start flags) in the order of user_ids.
    """
    dim = doc_vectors.shape[1]
    index = {u: i for i, u in enumerate(user_ids)}
    sums = np.zeros((len(user_ids), dim), dtype=np.float64)
    counts = np.zeros(len(user_ids), dtype=np.int64)
    rows = np.array([index[u] for u in doc_users], dtype=np.int64)
    np.add.at(sums, rows, normalize_rows(doc_vectors))
    np.add.at(counts, rows, 1)
    out = np.zeros_like(sums, dtype=np.float32)
    cold = [False] * len(user_ids)
    for i, u in enumerate(user_ids):
        if counts[i]:
            out[i] = sums[i] / counts[i]
        elif cold_start_queries and u in cold_start_queries:
            out[i] = cold_start_queries[u]
            cold[i] = True
        else:
            raise ValueError(f"user {u!r} has no profile documents and no query to fall back on (cold start)")
    return out, counts.tolist(), cold
