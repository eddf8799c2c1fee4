"""User clustering: HDBSCAN (noise users as one extra cluster), k-means, incremental assignment (§3.2, §3.7)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from prag_models.config.settings import ClusteringSettings

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
    projection: tuple[np.ndarray, np.ndarray] | None = None  # PCA (mean, components) applied before the fit

    def project(self, vectors: np.ndarray) -> np.ndarray:
        """Vectors in the space the model was fitted in (the PCA projection when there is one), as float64."""
        x = np.asarray(vectors, dtype=np.float64)
        if self.projection is None:
            return x
        mean, components = self.projection
        return (x - mean) @ components.T


def reduce(vectors: np.ndarray, dims: int, seed: int = 0) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """PCA to `dims` dimensions before clustering (None when the vectors are not wider): (reduced, (mean, comps))."""
    x = np.asarray(vectors, dtype=np.float64)
    if not dims or dims >= min(x.shape):
        return x, None
    from sklearn.decomposition import PCA

    pca = PCA(n_components=dims, svd_solver="randomized", random_state=seed).fit(x)
    projection = (pca.mean_.astype(np.float64), pca.components_.astype(np.float64))
    return (x - projection[0]) @ projection[1].T, projection


#: Above this many users the silhouette is estimated on a seeded sample of this size (it is quadratic in users).
SILHOUETTE_SAMPLE = 5000


def _silhouette(x: np.ndarray, labels: np.ndarray) -> float | None:
    """Silhouette score (on a seeded sample above SILHOUETTE_SAMPLE users), or None when it is undefined."""
    from sklearn.metrics import silhouette_score

    n_labels = len(set(labels.tolist()))
    if n_labels < 2 or n_labels >= len(labels):
        return None
    sample = SILHOUETTE_SAMPLE if len(labels) > SILHOUETTE_SAMPLE else None
    return float(silhouette_score(x, labels, metric="euclidean", sample_size=sample, random_state=0))


def cluster_users(
    vectors: np.ndarray,
    algorithm: str = "hdbscan",
    min_cluster_size: int = 2,
    min_samples: int = 0,
    kmeans_k: int = 0,
    seed: int = 0,
    reduce_dims: int = 0,
    hdbscan_algorithm: str = "best",
    n_jobs: int = 1,
) -> Clustering:
    """Cluster user vectors; HDBSCAN noise users (label −1) become one extra cluster (ClusterRAG code behaviour).

    reduce_dims > 0: PCA to that many dimensions first (kept in the result so later users are projected alike);
    hdbscan_algorithm and n_jobs (core distances) are passed to HDBSCAN.
    """
    n = len(vectors)
    if n == 0:
        raise ValueError("no users to cluster")
    if n < 2:
        return Clustering(np.zeros(n, dtype=np.int64), algorithm, 1, 0, None)
    x, projection = reduce(vectors, reduce_dims, seed)
    if algorithm == "kmeans":
        from sklearn.cluster import KMeans

        k = kmeans_k or max(2, int(round(np.sqrt(n / 2))))
        model = KMeans(n_clusters=min(k, n), n_init=10, random_state=seed).fit(x)
        labels = model.labels_.astype(np.int64)
        sil = _silhouette(x, labels)
        return Clustering(labels, algorithm, int(labels.max()) + 1, 0, sil, model, projection=projection)
    if algorithm != "hdbscan":
        raise ValueError(f"unknown clustering algorithm {algorithm!r} (hdbscan | kmeans)")
    import hdbscan

    model = hdbscan.HDBSCAN(
        min_cluster_size=max(2, min_cluster_size),
        min_samples=min_samples or None,
        metric="euclidean",
        prediction_data=True,
        algorithm=hdbscan_algorithm,
        core_dist_n_jobs=n_jobs,
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
    n_clusters = n_real + (1 if noise.any() else 0)
    return Clustering(labels, algorithm, n_clusters, int(noise.sum()), silhouette, model, noise_cluster, projection)


def assign_new_users(clustering: Clustering, vectors: np.ndarray) -> np.ndarray:
    """Assign users to the existing clusters without refitting (HDBSCAN approximate_predict / k-means nearest)."""
    if clustering.model is None:
        return np.zeros(len(vectors), dtype=np.int64)
    data = getattr(clustering.model, "_raw_data", None)  # HDBSCAN keeps its fit data for approximate_predict
    fitted = getattr(clustering.model, "n_features_in_", None) or (data.shape[1] if data is not None else None)
    if clustering.projection is not None:
        fitted = clustering.projection[0].shape[0]
    dims = np.shape(vectors)[1]
    if fitted is not None and dims != fitted:
        raise ValueError(
            f"the clustering was fitted on {fitted}-dimensional user vectors, the users to assign have {dims}: "
            "with clustering.user_similarity = taste | blend new users cannot be placed incrementally; refit instead "
            "(materialize user_clusters)"
        )
    x = clustering.project(vectors)
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


def reduction_quality(vectors: np.ndarray, sample: int, seed: int = 0, **fit: object) -> float | None:
    """Adjusted Rand index between the reduced and the full-dimension clustering of a seeded sample of users.

    `fit` holds cluster_users' keyword arguments (reduce_dims among them); None when there is nothing to compare.
    """
    from sklearn.metrics import adjusted_rand_score

    if not fit.get("reduce_dims") or sample < 2:
        return None
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(vectors), size=min(sample, len(vectors)), replace=False))
    x = np.asarray(vectors)[rows]
    reduced = cluster_users(x, seed=seed, **fit).labels  # type: ignore[arg-type]
    full = cluster_users(x, seed=seed, **{**fit, "reduce_dims": 0}).labels  # type: ignore[arg-type]
    return round(float(adjusted_rand_score(full, reduced)), 4)


def fit_clustering(
    vectors: np.ndarray, c: ClusteringSettings, measure_reduction: bool = True
) -> tuple[Clustering, dict[str, Any]]:
    """Cluster user vectors as the settings say (PCA first above reduce_above users) and what the fit cost and kept
    (``measure_reduction``: the ARI of the reduced fit against full dimensions on a sample, one more fit)."""
    dims = c.reduce_dims if len(vectors) > c.reduce_above else 0
    fit = dict(min_cluster_size=c.min_cluster_size, min_samples=c.min_samples, kmeans_k=c.kmeans_k,
               reduce_dims=dims, hdbscan_algorithm=c.hdbscan_algorithm, n_jobs=c.n_jobs)  # fmt: skip
    t0 = time.perf_counter()
    result = cluster_users(vectors, c.algorithm, seed=c.seed, **fit)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    quality = None
    if dims and measure_reduction:
        quality = reduction_quality(vectors, c.quality_sample, c.seed, algorithm=c.algorithm, **fit)
    return result, {
        "fit_seconds": round(seconds, 2),
        "reduced_dims": dims or None,
        "hdbscan_algorithm": c.hdbscan_algorithm if c.algorithm == "hdbscan" else None,
        "reduction_ari_vs_full_dims": quality,
        "reduction_quality_sample": min(c.quality_sample, len(vectors)) if quality is not None else None,
    }
