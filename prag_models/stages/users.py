"""Stage 3 (users): user embeddings, user clusters and intra-cluster similar users (docs/methods.md §3.1–3.3).

Document vectors stream from DuckDB as Arrow record batches into per-user sums, so memory is one batch plus
users × d; every table is written as Arrow (vectors as ``FLOAT[d]``).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prag_models.config.settings import Settings
from prag_models.storage.store import column_to_matrix, iter_batches, matrix_to_column, read_arrow, require_table
from prag_models.users.clustering import fit_clustering
from prag_models.users.embeddings import UserMeans
from prag_models.users.model_store import fit_version, save_model
from prag_models.users.pool_quality import (
    adjusted_rand,
    cluster_pool_precision,
    documents_per_user,
    neighbour_pool_precision,
)
from prag_models.users.similar import clustered_user_vectors, neighbour_table
from prag_models.users.taste import similarity_vectors


def cold_start_queries(con, task: str, users: pa.Array | None = None) -> dict[str, np.ndarray]:
    """Mean query embedding of each user of the task without documents (or of `users`): the fallback of §3.6."""
    if users is None:
        sql = (
            "SELECT user_id, embedding FROM query_embeddings WHERE task = ? AND user_id NOT IN "
            "(SELECT user_id FROM document_embeddings WHERE task = ?)"
        )
        table = con.sql(sql, params=[task, task]).to_arrow_table()
    else:
        con.register("_prag_cold", pa.table({"user_id": users}))
        try:
            sql = "SELECT user_id, embedding FROM query_embeddings WHERE task = ? AND user_id IN (FROM _prag_cold)"
            table = con.sql(sql, params=[task]).to_arrow_table()
        finally:
            con.unregister("_prag_cold")
    if not table.num_rows:
        return {}
    ids = table["user_id"].to_numpy(zero_copy_only=False)
    matrix = column_to_matrix(table["embedding"])
    return {u: matrix[ids == u].mean(axis=0) for u in np.unique(ids)}


def user_embedding_rows(
    con, task: str, default_share: bool = True, withheld: Collection[str] = ()
) -> tuple[pa.Table, dict[str, Any]]:
    """z_u = mean of the user's document embeddings that may shape other users' results (docs/privacy.md: private
    documents and non-sharing users' documents left out; ``withheld``: users treated as opted out too, the
    consent-cost scenario's); none: the mean of its query embeddings (§3.6); neither (a user known only from
    documents others may not see): no z_u, so no cluster and nobody's neighbour (``privacy.shareable.placed_by``)."""
    from prag_models.privacy.rules import sharing_rule
    from prag_models.privacy.shareable import placed_by

    require_table(con, "document_embeddings")
    require_table(con, "query_embeddings")
    sql = (
        "SELECT user_id FROM query_embeddings WHERE task = ? UNION "
        "SELECT user_id FROM document_embeddings WHERE task = ?"
    )
    users = sorted(u for (u,) in con.execute(sql, [task, task]).fetchall())
    value_set = pa.array(users, pa.string())
    means = UserMeans(users)
    shaping = sharing_rule(con, task, default_share)
    out_set = pa.array(sorted(withheld), pa.string())
    docs = "SELECT user_id, doc_id, embedding FROM document_embeddings WHERE task = ?"
    left_out = 0
    for batch in iter_batches(con, docs, [task]):
        rows = pc.index_in(batch["user_id"], value_set=value_set).to_numpy(zero_copy_only=False)
        vectors = column_to_matrix(batch["embedding"])
        keep = shaping(batch["user_id"], batch["doc_id"])
        if withheld:
            keep &= ~pc.is_in(batch["user_id"], value_set=out_set).to_numpy(zero_copy_only=False)
        means.add(rows[keep], vectors[keep])
        left_out += int((~keep).sum())
    unshaped = [u for u, n in zip(users, means.counts, strict=True) if n == 0]
    fallback = cold_start_queries(con, task, pa.array(unshaped, pa.string())) if unshaped else {}
    placed = np.array([placed_by(int(n), u in fallback) is not None for u, n in zip(users, means.counts, strict=True)],
                      dtype=bool)  # fmt: skip
    unplaced = {u: np.zeros(means.sums.shape[1], np.float32) for u, p in zip(users, placed, strict=True) if not p}
    vectors, counts, cold = means.result(fallback | unplaced)  # the unplaced rows are dropped below
    frame = pa.table(
        {
            "task": pa.array([task] * len(users), pa.string()),
            "user_id": value_set,
            "n_docs": pa.array(counts, pa.int64()),
            "cold_start": pa.array(cold, pa.bool_()),
            "embedding": matrix_to_column(vectors),
        }
    ).filter(pa.array(placed))
    return frame, {"users": frame.num_rows, "cold_start": int(sum(np.asarray(cold)[placed])),
                   "documents_left_out": left_out, "unplaced_users": len(unplaced)}  # fmt: skip


def planted_communities(settings: Settings, task: str) -> dict[str, int] | None:
    """The demo's planted community of each user (None when the source is not the demo)."""
    if settings.data.source != "demo":
        return None
    from prag_models.data.source import demo_root

    manifest = json.loads((demo_root(settings) / "demo_manifest.json").read_text())
    return manifest.get("tasks", manifest).get(task, {}).get("community_of_user")


def user_cluster_rows(con, task: str, settings: Settings) -> tuple[pa.Table, dict[str, Any]]:
    """Every user in exactly one cluster (HDBSCAN noise = one extra cluster, or k-means) of the vectors the configured
    user similarity compares (users/taste.py); on the demo, ARI and pool precision against the planted communities.

    The fitted model is stored (cluster_models) under the fit version its rows carry, for incremental assignment.
    """
    c = settings.clustering
    users = read_arrow(con, "user_embeddings", {"task": task}, "user_id", ["user_id", "embedding"])
    user_ids = users["user_id"].to_pylist()
    vectors, similarity = similarity_vectors(con, task, settings, user_ids, column_to_matrix(users["embedding"]))
    result, cost = fit_clustering(vectors, c)
    version = fit_version(task, user_ids, result.labels)
    save_model(con, task, version, result)
    n = len(user_ids)
    frame = pa.table(
        {
            "task": pa.array([task] * n, pa.string()),
            "user_id": users["user_id"],
            "cluster": pa.array(result.labels, pa.int64()),
            "algorithm": pa.array([c.algorithm] * n, pa.string()),
            "fit_version": pa.array([version] * n, pa.string()),
        }
    )
    entry: dict[str, Any] = {
        "algorithm": c.algorithm,
        "clusters": result.n_clusters,
        "noise_users": result.n_noise,
        "silhouette": result.silhouette,
        "fit_version": version,
        **cost,
        **similarity,
    }
    planted = planted_communities(settings, task)
    if planted:
        truth = {u: planted.get(u, -1) for u in user_ids}
        entry["adjusted_rand_vs_planted"] = adjusted_rand(user_ids, result.labels, truth)
        n_docs = documents_per_user(con, task)
        entry["cluster_pool_precision"] = cluster_pool_precision(user_ids, result.labels, n_docs, planted)
    return frame, entry


def similar_user_rows(con, task: str, settings: Settings) -> tuple[pa.Table, dict[str, Any]]:
    """Top-k most similar members of each user's own cluster (cosine of the configured user similarity's vectors,
    self excluded); on the demo, the pool precision of the neighbours' documents."""
    users = clustered_user_vectors(con, task)
    ids = users["user_id"].to_pylist()
    vectors, similarity = similarity_vectors(con, task, settings, ids, column_to_matrix(users["embedding"]))
    users = users.set_column(users.schema.get_field_index("embedding"), "embedding", matrix_to_column(vectors))
    frame = neighbour_table(task, users, settings.clustering.similar_users)
    with_lists = len(pc.unique(frame["user_id"])) if frame.num_rows else 0
    entry = {"pairs": frame.num_rows, "users_without_neighbours": users.num_rows - with_lists, **similarity}
    planted = planted_communities(settings, task)
    if planted:
        found: dict[str, list[str]] = {}
        for u, v in zip(frame["user_id"].to_pylist(), frame["neighbour_id"].to_pylist(), strict=True):
            found.setdefault(u, []).append(v)
        entry["neighbour_pool_precision"] = neighbour_pool_precision(found, documents_per_user(con, task), planted)
    return frame, entry
