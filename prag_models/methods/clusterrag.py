"""ClusterRAG retrieval (docs/methods.md §3.4–3.5): profile modes over similar users, two-stage cluster-then-document
search."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prag_models.methods.profiles import ProfileIndex, Retrieved, top_by_cosine
from prag_models.users.embeddings import normalize_rows

PROFILE_MODES = ("user_only", "collaborative", "hybrid")


def profile_users(mode: str, user_id: str, neighbours: Sequence[str]) -> list[str]:
    """Whose documents a profile mode may use: own, the similar users', or both (own first)."""
    if mode == "user_only":
        return [user_id]
    if mode == "collaborative":
        return [u for u in neighbours if u != user_id]
    if mode == "hybrid":
        return [user_id, *[u for u in neighbours if u != user_id]]
    raise ValueError(f"unknown profile mode {mode!r}; known: {PROFILE_MODES}")


def retrieve_profile_mode(
    index: ProfileIndex, mode: str, user_id: str, neighbours: Sequence[str], query_vector: np.ndarray, k: int
) -> list[Retrieved]:
    """Top-k documents by cosine over the pool of the profile mode."""
    return top_by_cosine(index, index.rows_of(profile_users(mode, user_id, neighbours)), query_vector, k)


@dataclass
class DocumentClusters:
    """Clusters of a candidate pool (noise documents form one cluster) and their unit centroids."""

    rows: np.ndarray  # pool rows into the profile index
    labels: np.ndarray  # cluster id per pool row
    centroids: np.ndarray  # (n_clusters, d) unit vectors


def cluster_documents(index: ProfileIndex, rows: np.ndarray, min_cluster_size: int = 2) -> DocumentClusters:
    """Cluster a pool of documents with HDBSCAN; noise documents become one extra cluster (docs/methods.md §3.5)."""
    x = index.vectors[rows]
    if len(rows) <= max(2, min_cluster_size):
        labels = np.zeros(len(rows), dtype=np.int64)
    else:
        import hdbscan

        raw = hdbscan.HDBSCAN(min_cluster_size=max(2, min_cluster_size), metric="euclidean").fit(x).labels_
        labels = raw.astype(np.int64)
        if (labels == -1).any():
            labels[labels == -1] = labels.max() + 1
    n = int(labels.max()) + 1 if len(labels) else 0
    centroids = np.stack([x[labels == c].mean(axis=0) for c in range(n)]) if n else np.zeros((0, x.shape[1]))
    return DocumentClusters(rows, labels, normalize_rows(centroids))


def retrieve_two_stage(
    index: ProfileIndex, clusters: DocumentClusters, query_vector: np.ndarray, k: int, top_clusters: int
) -> tuple[list[Retrieved], int]:
    """Pick the top-B clusters by cos(q, centroid), then the top-k documents inside them.

    If the B clusters hold fewer than k documents, further clusters are added in centroid order.
    Returns the documents and the number of documents scored (the O(K + B·N/K) cost).
    """
    if len(clusters.rows) == 0:
        return [], 0
    q = np.asarray(query_vector, dtype=np.float32)
    order = np.argsort(-(clusters.centroids @ q), kind="stable")
    chosen: list[int] = []
    size = 0
    for c in order:
        if len(chosen) >= top_clusters and size >= k:
            break
        chosen.append(int(c))
        size += int((clusters.labels == c).sum())
    pool = clusters.rows[np.isin(clusters.labels, chosen)]
    return top_by_cosine(index, pool, q, k), len(pool) + len(clusters.centroids)
