"""User clustering: HDBSCAN (noise users as one extra cluster), k-means, incremental assignment (§3.2, §3.7)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NOISE_LABEL = -1


@dataclass
class Clustering:
    """Cluster labels for users plus what is needed to assign new users later."""

    labels: np.ndarray  # one label per user; noise users share one cluster id (max label + 1)
    algorithm: str
    n_clusters: int
    n_noise: int
    silhouette: float | None
    model: object | None = None  # fitted HDBSCAN (prediction_data=True) or KMeans
    noise_cluster: int | None = None


def _silhouette(x: np.ndarray, labels: np.ndarray) -> float | None:
    """Silhouette score, or None when it is undefined (one cluster or every point its own)."""
    from sklearn.metrics import silhouette_score

    n_labels = len(set(labels.tolist()))
    if n_labels < 2 or n_labels >= len(labels):
        return None
    return float(silhouette_score(x, labels, metric="euclidean"))


def cluster_users(
    vectors: np.ndarray,
    algorithm: str = "hdbscan",
    min_cluster_size: int = 2,
    min_samples: int = 0,
    kmeans_k: int = 0,
    seed: int = 0,
) -> Clustering:
    """Cluster user vectors; HDBSCAN noise users (label −1) become one extra cluster (ClusterRAG code behaviour)."""
    n = len(vectors)
    if n == 0:
        raise ValueError("no users to cluster")
    if n < 2:
        return Clustering(np.zeros(n, dtype=np.int64), algorithm, 1, 0, None)
    x = np.asarray(vectors, dtype=np.float64)
    if algorithm == "kmeans":
        from sklearn.cluster import KMeans

        k = kmeans_k or max(2, int(round(np.sqrt(n / 2))))
        model = KMeans(n_clusters=min(k, n), n_init=10, random_state=seed).fit(x)
        labels = model.labels_.astype(np.int64)
        return Clustering(labels, algorithm, int(labels.max()) + 1, 0, _silhouette(x, labels), model)
    if algorithm != "hdbscan":
        raise ValueError(f"unknown clustering algorithm {algorithm!r} (hdbscan | kmeans)")
    import hdbscan

    model = hdbscan.HDBSCAN(
        min_cluster_size=max(2, min_cluster_size),
        min_samples=min_samples or None,
        metric="euclidean",
        prediction_data=True,
    ).fit(x)
    raw = model.labels_.astype(np.int64)
    noise = raw == NOISE_LABEL
    n_real = int(raw.max()) + 1 if (~noise).any() else 0
    labels = raw.copy()
    noise_cluster = n_real if noise.any() else None
    if noise.any():
        labels[noise] = n_real
    sil_mask = ~noise
    silhouette = _silhouette(x[sil_mask], raw[sil_mask]) if sil_mask.sum() > 2 else None
    return Clustering(
        labels, algorithm, n_real + (1 if noise.any() else 0), int(noise.sum()), silhouette, model, noise_cluster
    )


def assign_new_users(clustering: Clustering, vectors: np.ndarray) -> np.ndarray:
    """Assign users to the existing clusters without refitting (HDBSCAN approximate_predict / k-means nearest)."""
    x = np.asarray(vectors, dtype=np.float64)
    if clustering.model is None:
        return np.zeros(len(x), dtype=np.int64)
    if clustering.algorithm == "kmeans":
        return clustering.model.predict(x).astype(np.int64)
    import hdbscan

    raw, _ = hdbscan.approximate_predict(clustering.model, x)
    labels = raw.astype(np.int64)
    if clustering.noise_cluster is not None:
        labels[labels == NOISE_LABEL] = clustering.noise_cluster
    elif (labels == NOISE_LABEL).any():
        # No noise cluster existed: a new noise user opens one so every user keeps exactly one cluster.
        labels[labels == NOISE_LABEL] = clustering.n_clusters
    return labels
