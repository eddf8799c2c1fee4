"""Stage 3 (users): user embeddings, user clusters and intra-cluster similar users (docs/methods.md §3.1–3.3)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from prag_models.config import Settings
from prag_models.methods.task_tables import clustered_users
from prag_models.store import column_to_matrix, read_rows
from prag_models.users.clustering import cluster_users
from prag_models.users.embeddings import mean_user_embeddings
from prag_models.users.similar import intra_cluster_neighbours


def user_embedding_rows(con, task: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """z_u = mean of the user's document embeddings; no history: the mean of its query embeddings (§3.6)."""
    docs = read_rows(con, "document_embeddings", {"task": task})
    queries = read_rows(con, "query_embeddings", {"task": task})
    users = sorted(set(queries["user_id"]) | set(docs["user_id"]))
    q_by_user = {u: column_to_matrix(g["embedding"].tolist()).mean(axis=0) for u, g in queries.groupby("user_id")}
    vectors, counts, cold = mean_user_embeddings(
        users, docs["user_id"].tolist(), column_to_matrix(docs["embedding"].tolist()), q_by_user
    )
    frame = pd.DataFrame(
        {"task": task, "user_id": users, "n_docs": counts, "cold_start": cold, "embedding": list(vectors)}
    )
    return frame, {"users": len(users), "cold_start": int(sum(cold))}


def planted_communities(settings: Settings, task: str) -> dict[str, int] | None:
    """The demo's planted community of each user (None when the source is not the demo)."""
    if settings.data.source != "demo":
        return None
    from prag_models.data.source import demo_root

    manifest = json.loads((demo_root(settings) / "demo_manifest.json").read_text())
    return manifest.get("tasks", manifest).get(task, {}).get("community_of_user")


def user_cluster_rows(con, task: str, settings: Settings) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Every user in exactly one cluster (HDBSCAN noise = one extra cluster, or k-means); ARI on the demo."""
    from sklearn.metrics import adjusted_rand_score

    c = settings.clustering
    users = read_rows(con, "user_embeddings", {"task": task}, order_by="user_id")
    result = cluster_users(
        column_to_matrix(users["embedding"].tolist()),
        c.algorithm,
        c.min_cluster_size,
        c.min_samples,
        c.kmeans_k,
        c.seed,
    )
    frame = pd.DataFrame(
        {"task": task, "user_id": users["user_id"], "cluster": result.labels, "algorithm": c.algorithm}
    )
    entry: dict[str, Any] = {
        "algorithm": c.algorithm,
        "clusters": result.n_clusters,
        "noise_users": result.n_noise,
        "silhouette": result.silhouette,
    }
    planted = planted_communities(settings, task)
    if planted:
        truth = [planted.get(u, -1) for u in users["user_id"]]
        entry["adjusted_rand_vs_planted"] = round(float(adjusted_rand_score(truth, result.labels)), 4)
    return frame, entry


def similar_user_rows(con, task: str, settings: Settings) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Top-k most similar members of each user's own cluster (cosine of user embeddings, self excluded)."""
    users = clustered_users(con, task)
    rows = intra_cluster_neighbours(
        users["user_id"].tolist(),
        column_to_matrix(users["embedding"].tolist()),
        users["cluster"].to_numpy(),
        settings.clustering.similar_users,
    )
    frame = pd.DataFrame(rows, columns=["user_id", "neighbour_id", "rank", "similarity"])
    frame.insert(0, "task", task)
    missing = int(len(set(users["user_id"]) - set(frame["user_id"])))
    return frame, {"pairs": len(frame), "users_without_neighbours": missing}
