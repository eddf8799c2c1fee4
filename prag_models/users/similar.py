"""Similar users: intra-cluster top-k by cosine similarity, self excluded (docs/methods.md §3.3).

Computed in blocks of users, so a large cluster (HDBSCAN's noise cluster can hold most users) costs a block × cluster
similarity matrix at a time, never cluster × cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from prag_models.storage.store import column_to_matrix
from prag_models.users.embeddings import normalize_rows

#: Users whose neighbours are computed together (memory: BLOCK × cluster size floats).
BLOCK = 2048


def _top_k(sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k largest entries in the order a stable descending argsort gives (ties: lower column first)."""
    if sims.shape[1] <= k:
        order = np.argsort(-sims, axis=1, kind="stable")
        return order, np.take_along_axis(sims, order, axis=1)
    kth = -np.partition(-sims, k - 1, axis=1)[:, k - 1 : k]  # the k-th largest value of each row
    rows, cols = np.nonzero(sims >= kth)  # every candidate, ties at the k-th value included
    vals = sims[rows, cols]
    order = np.lexsort((cols, -vals, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    starts = np.searchsorted(rows, np.arange(len(sims)))
    take = (starts[:, None] + np.arange(k)[None, :]).reshape(-1)
    return cols[take].reshape(len(sims), k), vals[take].reshape(len(sims), k)


def neighbour_arrays(
    vectors: np.ndarray, labels: np.ndarray, k: int, only: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Top-k most similar members of each user's own cluster, as (user row, neighbour row, rank, cosine) arrays.

    only: boolean mask of the users whose lists are wanted (default: everyone); neighbours come from all members.
    """
    x = normalize_rows(np.asarray(vectors, dtype=np.float32))
    labels = np.asarray(labels)
    wanted = np.ones(len(x), dtype=bool) if only is None else np.asarray(only, dtype=bool)
    out: list[tuple[np.ndarray, ...]] = []
    for cluster in np.unique(labels[wanted]):
        members = np.flatnonzero(labels == cluster)
        if len(members) < 2:
            continue
        kk = min(k, len(members) - 1)
        targets = np.flatnonzero(wanted[members])
        for start in range(0, len(targets), BLOCK):
            local = targets[start : start + BLOCK]
            sims = x[members[local]] @ x[members].T
            sims[np.arange(len(local)), local] = -np.inf
            cols, vals = _top_k(sims, kk)
            out.append((np.repeat(members[local], kk), members[cols].reshape(-1),
                        np.tile(np.arange(1, kk + 1), len(local)), vals.reshape(-1)))  # fmt: skip
    if not out:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, np.zeros(0, dtype=np.float32)
    return tuple(np.concatenate(parts) for parts in zip(*out, strict=True))  # type: ignore[return-value]


def intra_cluster_neighbours(
    user_ids: Sequence[str], vectors: np.ndarray, labels: np.ndarray, k: int
) -> list[tuple[str, str, int, float]]:
    """Top-k most similar members of each user's own cluster: rows (user_id, neighbour_id, rank, cosine)."""
    users, neighbours, ranks, sims = neighbour_arrays(vectors, labels, k)
    return [
        (user_ids[u], user_ids[n], int(r), float(s)) for u, n, r, s in zip(users, neighbours, ranks, sims, strict=True)
    ]


def clustered_user_vectors(con, task: str, only_clusters: pa.Array | None = None) -> pa.Table:
    """user_id, embedding (z_u) and cluster of the task's clustered users (of only_clusters when given), by user."""
    sql = (
        "SELECT e.user_id, e.embedding, c.cluster FROM user_embeddings e JOIN user_clusters c USING (task, user_id) "
        "WHERE task = ?"
    )
    if only_clusters is None:
        return con.sql(sql + " ORDER BY e.user_id", params=[task]).to_arrow_table()
    con.register("_prag_clusters", pa.table({"cluster": only_clusters}))
    try:
        sql += " AND c.cluster IN (FROM _prag_clusters) ORDER BY e.user_id"
        return con.sql(sql, params=[task]).to_arrow_table()
    finally:
        con.unregister("_prag_clusters")


def neighbour_table(task: str, users: pa.Table, k: int, only: np.ndarray | None = None) -> pa.Table:
    """similar_users rows (task, user_id, neighbour_id, rank, similarity) of users (rows of `only` when given)."""
    rows, neighbours, ranks, sims = neighbour_arrays(
        column_to_matrix(users["embedding"]), users["cluster"].to_numpy(), k, only
    )
    ids = users["user_id"]
    return pa.table(
        {
            "task": pa.array([task] * len(rows), pa.string()),
            "user_id": ids.take(pa.array(rows, pa.int64())),
            "neighbour_id": ids.take(pa.array(neighbours, pa.int64())),
            "rank": pa.array(ranks, pa.int64()),
            "similarity": pa.array(sims, pa.float64()),
        }
    )
