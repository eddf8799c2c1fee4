"""ClusterRAG retrieval (docs/methods.md §3.4–3.5): profile modes over similar users, two-stage cluster-then-document
search."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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
    pool = index.visible_rows(user_id, profile_users(mode, user_id, neighbours))
    return top_by_cosine(index, pool, query_vector, k)


#: Pools larger than this are clustered with FAISS k-means (√N clusters) instead of HDBSCAN, whose cost grows about
#: quadratically with the pool (docs/methods.md §3.5 names HDBSCAN; k-means keeps the O(K + B·N/K) point at scale).
HDBSCAN_MAX_POOL = 5000
#: Up to this pool size HDBSCAN runs its exact pairwise ("generic") algorithm (memory: pool² doubles).
HDBSCAN_GENERIC_MAX_POOL = 2000
#: From this pool size on the clusters are searched through a FAISS IVF index whose lists are the clusters.
IVF_MIN_POOL = 4096


@dataclass
class DocumentClusters:
    """Clusters of a candidate pool (noise documents form one cluster), their unit centroids and an IVF index whose
    inverted lists are exactly those clusters — built once per pool and reused by every query on it."""

    rows: np.ndarray  # pool rows into the profile index
    labels: np.ndarray  # cluster id per pool row
    centroids: np.ndarray  # (n_clusters, d) unit vectors
    ivf: object = None  # faiss.IndexIVFFlat over the pool, list c = cluster c; ids are pool positions
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # documents per cluster
    quantizer: object = None  # the centroid index the IVF index points to (kept alive with it)
    members: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # pool positions by cluster
    starts: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))  # cluster c: members[starts[c]:]


def _labels(x: np.ndarray, min_cluster_size: int, seed: int) -> np.ndarray:
    """HDBSCAN labels (noise → one extra cluster) up to HDBSCAN_MAX_POOL documents, FAISS k-means beyond."""
    if len(x) <= max(2, min_cluster_size):
        return np.zeros(len(x), dtype=np.int64)
    if len(x) > HDBSCAN_MAX_POOL:
        import faiss

        k = int(np.ceil(np.sqrt(len(x))))
        kmeans = faiss.Kmeans(x.shape[1], k, niter=20, seed=seed, spherical=True, verbose=False)
        kmeans.train(np.ascontiguousarray(x, dtype=np.float32))
        labels = kmeans.index.search(np.ascontiguousarray(x, dtype=np.float32), 1)[1][:, 0].astype(np.int64)
        _, dense = np.unique(labels, return_inverse=True)  # drop empty clusters
        return dense.astype(np.int64)
    import hdbscan

    # Above 60 dimensions HDBSCAN's default is Prim's exact minimum spanning tree over a kd-tree; its exact pairwise
    # ("generic") algorithm builds the same tree and, on pools of a few hundred 384-d documents (a user and its
    # neighbours), about 5x faster. At 60 dimensions or fewer the default is an approximate Boruvka tree: kept.
    generic = x.shape[1] > 60 and len(x) <= HDBSCAN_GENERIC_MAX_POOL
    model = hdbscan.HDBSCAN(min_cluster_size=max(2, min_cluster_size), metric="euclidean",
                            algorithm="generic" if generic else "best")  # fmt: skip
    labels = model.fit(x.astype(np.float64) if generic else x).labels_
    labels = labels.astype(np.int64)
    if (labels == -1).any():
        labels[labels == -1] = labels.max() + 1
    return labels


def cluster_documents(
    index: ProfileIndex, rows: np.ndarray, min_cluster_size: int = 2, seed: int = 0
) -> DocumentClusters:
    """Cluster a pool of documents once (docs/methods.md §3.5) and index it as IVF lists = clusters."""
    x = np.ascontiguousarray(index.vectors[rows], dtype=np.float32)
    return index_clusters(index, rows, _labels(x, min_cluster_size, seed))


def index_clusters(index: ProfileIndex, rows: np.ndarray, labels: np.ndarray) -> DocumentClusters:
    """Centroids and the lists (list c = the pool documents labelled c) of a labelled pool; a FAISS IVF index over
    those lists from IVF_MIN_POOL documents on (smaller pools: the listed documents are scored with one product)."""
    import faiss

    x = np.ascontiguousarray(index.vectors[rows], dtype=np.float32)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    n = int(labels.max()) + 1 if len(labels) else 0
    if n == 0:
        return DocumentClusters(rows, labels, np.zeros((0, x.shape[1]), dtype=np.float32))
    members = np.argsort(labels, kind="stable")
    sizes = np.bincount(labels, minlength=n).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    sums = np.zeros((n, x.shape[1]), dtype=np.float64)
    filled = sizes > 0
    sums[filled] = np.add.reduceat(x[members].astype(np.float64), starts[:-1][filled], axis=0)
    centroids = normalize_rows(sums / np.maximum(sizes, 1)[:, None])
    if len(x) < IVF_MIN_POOL:
        return DocumentClusters(rows, labels, centroids, None, sizes, None, members, starts)
    quantizer = faiss.IndexFlatIP(x.shape[1])
    quantizer.add(centroids)
    ivf = faiss.IndexIVFFlat(quantizer, x.shape[1], n, faiss.METRIC_INNER_PRODUCT)
    ivf.is_trained = True  # the lists are our clusters: no k-means inside FAISS
    ivf.add_core(len(x), faiss.swig_ptr(x), None, faiss.swig_ptr(labels))
    return DocumentClusters(rows, labels, centroids, ivf, sizes, quantizer, members, starts)


def _probe(index: ProfileIndex, clusters: DocumentClusters, order: np.ndarray, top_clusters: int, k: int) -> int:
    """How many clusters to open in centroid order: the top B, then more until they hold k distinct texts (or every
    cluster is open)."""
    n_clusters = len(order)
    probe = max(1, min(top_clusters, n_clusters))
    while probe < n_clusters and clusters.sizes[order[:probe]].sum() < k:
        probe += 1
    if index.text_keys is None:
        return probe
    keys = np.unique(index.text_keys[clusters.rows[_listed(clusters, order[:probe])]])
    while probe < n_clusters and len(keys) < k:
        keys = np.union1d(keys, index.text_keys[clusters.rows[_listed(clusters, order[probe : probe + 1])]])
        probe += 1
    return probe


def _listed(clusters: DocumentClusters, chosen: np.ndarray) -> np.ndarray:
    """The pool positions of the chosen clusters' documents, cluster by cluster."""
    return np.concatenate([clusters.members[clusters.starts[c] : clusters.starts[c + 1]] for c in chosen])


def retrieve_two_stage(
    index: ProfileIndex, clusters: DocumentClusters, query_vector: np.ndarray, k: int, top_clusters: int
) -> tuple[list[Retrieved], int]:
    """Pick the top-B clusters by cos(q, centroid), then the top-k documents inside them, one per text (FAISS IVF
    search over those lists only).

    If the B clusters hold fewer than k distinct texts, further clusters are added in centroid order (docs/methods.md
    §3.5), so that two-stage shows k texts whenever the pool holds them.
    Returns the documents and the number of documents scored (the O(K + B·N/K) cost: centroids + listed documents).
    """
    if len(clusters.rows) == 0 or len(clusters.centroids) == 0:
        return [], 0
    q = np.ascontiguousarray(np.atleast_2d(query_vector), dtype=np.float32)
    n_clusters = len(clusters.centroids)
    cos = clusters.centroids @ q[0]
    order = np.argsort(-cos, kind="stable")
    probe = _probe(index, clusters, order, top_clusters, k)
    chosen = order[:probe]
    size = int(clusters.sizes[chosen].sum())
    if clusters.ivf is None:  # a small pool: score the chosen lists' documents directly
        listed = _listed(clusters, chosen)
        scores = index.vectors[clusters.rows[listed]] @ q[0]
        top = np.lexsort((listed, -scores))
        return index.as_retrieved(clusters.rows[listed[top]], scores[top], k), size + n_clusters
    clusters.ivf.nprobe = probe  # search_preassigned takes exactly nprobe lists per query
    found = _ivf_top(index, clusters, q, chosen, cos, min(index.depth(k), size), k)
    if len(found) < k and index.depth(k) < size:  # one text filled the whole depth: rank every listed document
        found = _ivf_top(index, clusters, q, chosen, cos, size, k)
    return found, size + n_clusters


def _ivf_top(index: ProfileIndex, clusters: DocumentClusters, q: np.ndarray, chosen: np.ndarray, cos: np.ndarray,
             depth: int, k: int) -> list[Retrieved]:  # fmt: skip
    """The first k distinct texts of the chosen lists' top ``depth`` documents (FAISS IVF search)."""
    scores, local = clusters.ivf.search_preassigned(
        q, depth, chosen[None, :].astype(np.int64), cos[chosen][None, :].astype(np.float32)
    )
    keep = local[0] >= 0
    # FAISS returns equal scores in list order; order by (score desc, pool position) as the flat path does
    pairs = sorted(zip(-scores[0][keep], local[0][keep], strict=True))
    pool_pos = np.asarray([p for _, p in pairs], dtype=np.int64)
    return index.as_retrieved(clusters.rows[pool_pos], [-s for s, _ in pairs], k)
