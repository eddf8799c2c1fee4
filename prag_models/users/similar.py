"""Similar users: intra-cluster top-k by cosine similarity, self excluded (docs/methods.md §3.3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prag_models.users.embeddings import normalize_rows


def intra_cluster_neighbours(
    user_ids: Sequence[str], vectors: np.ndarray, labels: np.ndarray, k: int
) -> list[tuple[str, str, int, float]]:
    """Top-k most similar members of each user's own cluster: rows (user_id, neighbour_id, rank, cosine)."""
    x = normalize_rows(np.asarray(vectors, dtype=np.float32))
    rows: list[tuple[str, str, int, float]] = []
    for cluster in np.unique(labels):
        members = np.flatnonzero(labels == cluster)
        if len(members) < 2:
            continue
        sims = x[members] @ x[members].T
        np.fill_diagonal(sims, -np.inf)
        for local, user_row in enumerate(members):
            order = np.argsort(-sims[local], kind="stable")[: min(k, len(members) - 1)]
            for rank, j in enumerate(order, 1):
                rows.append((user_ids[user_row], user_ids[members[j]], rank, float(sims[local, j])))
    return rows
