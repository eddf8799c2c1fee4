"""User embeddings, clustering, similar users and the retrieval methods on small hand-made vectors."""

import numpy as np
import pytest

from prag_models.methods import baselines, clusterrag
from prag_models.methods.profiles import ProfileIndex
from prag_models.users.clustering import assign_new_users, cluster_users
from prag_models.users.embeddings import mean_user_embeddings
from prag_models.users.similar import intra_cluster_neighbours


def _unit(*v):
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def test_mean_user_embedding_and_cold_start():
    vecs = np.stack([_unit(1, 0), _unit(0, 1), _unit(1, 0)])
    out, counts, cold = mean_user_embeddings(["a", "b", "c"], ["a", "a", "b"], vecs, {"c": _unit(0, 1)})
    np.testing.assert_allclose(out[0], [0.5, 0.5])
    np.testing.assert_allclose(out[1], [1.0, 0.0])
    np.testing.assert_allclose(out[2], [0.0, 1.0])
    assert counts == [2, 1, 0] and cold == [False, False, True]
    with pytest.raises(ValueError, match="user 'c' has no profile documents"):
        mean_user_embeddings(["a", "c"], ["a"], vecs[:1])


def _blobs(seed=0, per=8):
    rng = np.random.default_rng(seed)
    centers = np.array([[5, 0, 0], [0, 5, 0], [0, 0, 5]], dtype=float)
    x = np.concatenate([c + rng.normal(0, 0.2, (per, 3)) for c in centers])
    return x, np.repeat(np.arange(3), per)


def test_hdbscan_recovers_blobs_and_noise_becomes_one_cluster():
    from sklearn.metrics import adjusted_rand_score

    x, truth = _blobs()
    x = np.concatenate([x, [[20, 20, 20], [-20, 20, -20]]])
    result = cluster_users(x, "hdbscan", min_cluster_size=3)
    assert adjusted_rand_score(truth, result.labels[:24]) == pytest.approx(1.0)
    assert result.n_noise == 2 and result.labels[24] == result.labels[25] == result.noise_cluster == 3
    assert result.silhouette is not None and result.silhouette > 0.8
    # Incremental assignment: a point near blob 1 joins that cluster, a far point joins the noise cluster.
    new = assign_new_users(result, np.array([[0.1, 5.1, 0.0], [50.0, -50.0, 0.0]]))
    assert new[0] == result.labels[8] and new[1] == result.noise_cluster


def test_kmeans_option():
    x, truth = _blobs()
    result = cluster_users(x, "kmeans", kmeans_k=3)
    assert result.n_clusters == 3 and len(set(result.labels[truth == 0])) == 1
    with pytest.raises(ValueError, match="unknown clustering algorithm"):
        cluster_users(x, "dbscan")


def test_intra_cluster_neighbours_exclude_self_and_other_clusters():
    vecs = np.stack([_unit(1, 0), _unit(1, 0.1), _unit(1, 0.5), _unit(0, 1)])
    rows = intra_cluster_neighbours(["a", "b", "c", "d"], vecs, np.array([0, 0, 0, 1]), k=1)
    assert rows[0][:3] == ("a", "b", 1)
    assert {(u, n) for u, n, _, _ in rows} == {("a", "b"), ("b", "a"), ("c", "b")}


@pytest.fixture
def index():
    # user u: docs about x-axis; user v (neighbour): docs about y-axis and one on x.
    vecs = np.stack([_unit(1, 0, 0), _unit(1, 0.2, 0), _unit(0, 1, 0), _unit(0, 1, 0.1), _unit(0.9, 0, 0.1)])
    return ProfileIndex(
        ["d1", "d2", "d3", "d4", "d5"],
        ["u", "u", "v", "v", "v"],
        ["red apple", "green apple pie", "blue sky", "sky at night", "apple tree"],
        vecs,
        np.ones(5, dtype=bool),  # everyone shares (docs/privacy.md)
    )


def test_baselines_use_only_own_profile(index):
    rng = np.random.default_rng(0)
    assert {r.doc_id for r in baselines.retrieve_random(index, "u", 5, rng)} == {"d1", "d2"}
    assert [r.doc_id for r in baselines.retrieve_recency(index, "u", 1)] == ["d2"]
    assert [r.doc_id for r in baselines.retrieve_dense(index, "u", _unit(0, 1, 0), 1)] == ["d2"]
    assert [r.doc_id for r in baselines.retrieve_bm25(index, "v", "night sky", 1)] == ["d4"]
    assert baselines.retrieve_dense(index, "nobody", _unit(1, 0, 0), 2) == []


def test_profile_modes(index):
    q = _unit(0, 1, 0)
    own = clusterrag.retrieve_profile_mode(index, "user_only", "u", ["v"], q, 2)
    collab = clusterrag.retrieve_profile_mode(index, "collaborative", "u", ["v"], q, 2)
    hybrid = clusterrag.retrieve_profile_mode(index, "hybrid", "u", ["v"], q, 2)
    assert {r.source_user_id for r in own} == {"u"}
    assert {r.source_user_id for r in collab} == {"v"} and collab[0].doc_id == "d3"
    assert [r.doc_id for r in hybrid] == ["d3", "d4"]
    with pytest.raises(ValueError, match="unknown profile mode"):
        clusterrag.profile_users("everyone", "u", [])


def test_two_stage_scores_fewer_documents(index):
    rows = index.visible_rows("u", ["u", "v"])
    clusters = clusterrag.index_clusters(index, rows, np.array([0, 0, 1, 1, 0]))
    found, scored = clusterrag.retrieve_two_stage(index, clusters, _unit(0, 1, 0), k=2, top_clusters=1)
    assert [r.doc_id for r in found] == ["d3", "d4"]
    assert scored == 2 + 2  # two documents of the chosen cluster + two centroids
    # k larger than the chosen cluster: the next cluster is added.
    found, _ = clusterrag.retrieve_two_stage(index, clusters, _unit(0, 1, 0), k=3, top_clusters=1)
    assert len(found) == 3


def test_two_stage_at_scale_uses_kmeans_lists_and_finds_the_flat_top_k(monkeypatch):
    """Past HDBSCAN_MAX_POOL the pool is clustered once with k-means; each query scores only the probed lists."""
    monkeypatch.setattr(clusterrag, "HDBSCAN_MAX_POOL", 500)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((20, 16))
    x = (centers[rng.integers(0, 20, 2000)] + rng.normal(0, 0.15, (2000, 16))).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    idx = ProfileIndex([f"d{i}" for i in range(2000)], ["u"] * 2000, ["t"] * 2000, x)
    clusters = clusterrag.cluster_documents(idx, np.arange(2000), 2)
    assert len(clusters.centroids) == 45 and clusters.sizes.sum() == 2000
    hits = scored_total = 0
    for q in x[:50]:
        found, scored = clusterrag.retrieve_two_stage(idx, clusters, q, k=10, top_clusters=3)
        flat = clusterrag.top_by_cosine(idx, np.arange(2000), q, 10)
        hits += len({r.row for r in found} & {r.row for r in flat})
        scored_total += scored
    assert hits / 500 >= 0.95 and scored_total / 50 < 0.25 * 2000


def test_cluster_documents_noise_cluster():
    vecs = np.concatenate(
        [
            np.tile(_unit(1, 0, 0), (4, 1)) + np.random.default_rng(0).normal(0, 0.01, (4, 3)),
            np.tile(_unit(0, 1, 0), (4, 1)) + np.random.default_rng(1).normal(0, 0.01, (4, 3)),
            [_unit(0, 0, 1)],
        ]
    ).astype(np.float32)
    idx = ProfileIndex([f"d{i}" for i in range(9)], ["u"] * 9, ["t"] * 9, vecs)
    clusters = clusterrag.cluster_documents(idx, np.arange(9), 2)
    assert len(set(clusters.labels[:4])) == 1 and len(set(clusters.labels[4:8])) == 1
    assert clusters.labels[8] not in (clusters.labels[0], clusters.labels[4])
    np.testing.assert_allclose(np.linalg.norm(clusters.centroids, axis=1), 1.0, rtol=1e-5)
