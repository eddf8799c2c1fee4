"""Where an incremental update places the users it changed (docs/methods.md §3.6-3.7, docs/privacy.md): their z_u by
the rule of the full stage (``stages/users.user_embedding_rows``) — the mean of the user's shareable documents, else
of its own questions, else no z_u at all (:func:`prag_models.privacy.shareable.placed_by`: a user known only from
documents others may not see is in no cluster and nobody's neighbour) — and the stored cluster a placed user joins.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from prag_models.config.settings import ClusteringSettings
from prag_models.privacy.shareable import placed_by
from prag_models.storage.store import column_to_matrix, table_exists
from prag_models.users.clustering import assign_new_users, cluster_users
from prag_models.users.embeddings import mean_user_embeddings


@dataclass
class Placement:
    """The changed users' z_u: the placed users (in the given order) with their vectors, shareable-document counts
    and cold-start flags, and the users nothing places."""

    users: list[str]
    vectors: np.ndarray
    counts: list[int]
    cold: list[bool]
    unplaced: list[str]


def question_vectors(con: duckdb.DuckDBPyConnection, task: str) -> dict[str, np.ndarray]:
    """Mean query embedding of each changed user (users in view _inc_users) that asks questions: the cold start."""
    if not table_exists(con, "query_embeddings"):
        return {}
    sql = (
        "SELECT user_id, embedding FROM query_embeddings WHERE task = ? AND user_id IN (SELECT user_id FROM _inc_users)"
    )
    rows = con.sql(sql, params=[task]).to_arrow_table()
    ids, matrix = np.asarray(rows["user_id"].to_pylist(), dtype=object), column_to_matrix(rows["embedding"])
    return {u: matrix[ids == u].mean(axis=0) for u in set(ids.tolist())}


def place_users(
    users: Sequence[str],
    doc_users: Sequence[str],
    doc_matrix: np.ndarray,
    shareable: np.ndarray,
    questions: dict[str, np.ndarray],
) -> Placement:
    """z_u of each user from its shareable documents (``shareable``: per row of doc_users / doc_matrix), else its
    questions; a user with neither is left unplaced."""
    shareable = np.asarray(shareable, dtype=bool)
    owners = [u for u, keep in zip(doc_users, shareable, strict=True) if keep]
    shared = Counter(owners)
    placed = [u for u in users if placed_by(shared.get(u, 0), u in questions) is not None]
    vectors, counts, cold = mean_user_embeddings(placed, owners, doc_matrix[shareable], questions)
    return Placement(placed, vectors, counts, cold, sorted(set(users) - set(placed), key=list(users).index))


def unplaced_users(con: duckdb.DuckDBPyConnection, task: str, users: Sequence[str], default_share: bool) -> set[str]:
    """Of ``users``, those the rule places nowhere: no shareable document in profile_documents, no question."""
    if not users:
        return set()
    from prag_models.privacy.rules import sharing_rule

    def read(table: str, columns: str) -> pa.Table:
        """The users' rows of a table (none when it does not exist)."""
        if not table_exists(con, table):
            return pa.table({c: pa.array([], pa.string()) for c in columns.split(", ")})
        sql = f"SELECT {columns} FROM {table} WHERE task = ? AND user_id IN (FROM _placement_users)"
        return con.sql(sql, params=[task]).to_arrow_table()

    con.register("_placement_users", pa.table({"user_id": pa.array(list(users), pa.string())}))
    try:
        docs = read("profile_documents", "user_id, doc_id")
        asked = set(read("query_embeddings", "user_id")["user_id"].to_pylist())
    finally:
        con.unregister("_placement_users")
    keep = sharing_rule(con, task, default_share)(docs["user_id"], docs["doc_id"])
    shared = Counter(np.asarray(docs["user_id"].to_pylist(), dtype=object)[keep].tolist())
    return {u for u in users if placed_by(shared.get(u, 0), u in asked) is None}


def assign_to_reference(
    ref_vectors: np.ndarray, ref_labels: np.ndarray, vectors: np.ndarray, settings: ClusteringSettings, next_id: int
) -> tuple[np.ndarray, float]:
    """Refit on the reference, predict the new vectors, map refit labels to stored ids (unmatched → next_id).

    Returns (labels, agreement): agreement is the share of reference users whose mapped refit label equals their
    stored label (1.0 when the reference is the exact data of the last fit: HDBSCAN and seeded k-means are
    deterministic).
    """
    ref_labels = np.asarray(ref_labels, dtype=np.int64)
    c = settings
    fit = cluster_users(ref_vectors, c.algorithm, c.min_cluster_size, c.min_samples, c.kmeans_k, c.seed)
    mapping: dict[int, int] = {}
    for raw in np.unique(fit.labels):
        values, counts = np.unique(ref_labels[fit.labels == raw], return_counts=True)
        mapping[int(raw)] = int(values[np.argmax(counts)])
    mapped = np.array([mapping[int(r)] for r in fit.labels])
    agreement = float((mapped == ref_labels).mean())
    try:
        raw_new = assign_new_users(fit, vectors)
    except (ValueError, IndexError, AttributeError):  # e.g. an HDBSCAN fit without any cluster
        raw_new = None
    if raw_new is None:
        return nearest_centroid(ref_vectors, ref_labels, vectors), agreement
    return np.array([mapping.get(int(r), next_id) for r in raw_new], dtype=np.int64), agreement


def nearest_centroid(ref_vectors: np.ndarray, ref_labels: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Label of the nearest cluster centroid (euclidean) for each vector."""
    clusters = np.unique(ref_labels)
    centroids = np.stack([ref_vectors[ref_labels == c].mean(axis=0) for c in clusters])
    dist = ((vectors[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
    return clusters[np.argmin(dist, axis=1)].astype(np.int64)
