"""Retrieval at scale (issue 14): the profile index read without a Python object per document, exact search in
blocks, the IVF corpus index under a visibility mask, dense_global and community retrieval equal to their flat
definitions."""

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from prag_models.methods import baselines
from prag_models.methods.community import CommunityRetriever
from prag_models.methods.profiles import ProfileIndex, top_by_cosine
from prag_models.methods.task_tables import profile_index, read_profile_index
from prag_models.methods.vector_index import CorpusIndex, knn_rows, merge_top_k
from prag_models.storage.store import matrix_to_column, replace_rows


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _corpus(n_users=30, per=20, d=16, seed=0):
    """Users around 5 topics; every third user does not share, every seventh document is private."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((5, d))
    users = [f"u{i:03d}" for i in range(n_users) for _ in range(per)]
    topic = np.repeat(np.arange(n_users) % 5, per)
    vecs = _unit(centres[topic] + rng.normal(0, 0.6, (len(users), d)))
    ids = [f"d{i}" for i in range(len(users))]
    shareable = np.array([int(u[1:]) % 3 != 0 and i % 7 != 0 for i, u in enumerate(users)])
    return ProfileIndex(ids, users, ids, vecs, shareable)


def _flat_visible(index, viewer, q, k):
    """The definition: cosine over everything the viewer may see."""
    return top_by_cosine(index, index.visible_rows(viewer), q, k)


def test_knn_rows_in_blocks_equals_one_product():
    rng = np.random.default_rng(1)
    x = _unit(rng.standard_normal((3000, 8)))
    rows = np.sort(rng.choice(3000, 1700, replace=False))
    q = _unit(rng.standard_normal((40, 8)))
    s, r = knn_rows(x, rows, q, 7, block=256)
    ref = np.argsort(-(q @ x[rows].T), axis=1, kind="stable")[:, :7]
    np.testing.assert_array_equal(r, rows[ref])
    s2, r2 = merge_top_k([s[:, :3], s], [r[:, :3], r], 5)  # a row found twice counts once
    np.testing.assert_array_equal(r2, r[:, :5])


def test_dense_global_exact_and_ivf_respect_visibility():
    index = _corpus()
    rng = np.random.default_rng(2)
    viewers = [index.users[i] for i in rng.integers(0, len(index.users), 60)]
    q = _unit(rng.standard_normal((60, 16)))
    exact = baselines.retrieve_dense_global(index, viewers, q, 5)
    for v, qi, found in zip(viewers, q, exact, strict=True):
        assert [f.row for f in found] == [f.row for f in _flat_visible(index, v, qi, 5)]
    ivf = CorpusIndex.build(index.vectors, ann_above=100, nprobe=8)
    assert ivf.kind.startswith("ivf24,sq8")
    approx = baselines.retrieve_dense_global(index, viewers, q, 5, ivf)
    visible = {v: set(index.visible_rows(v).tolist()) for v in set(viewers)}
    assert all({f.row for f in found} <= visible[v] for v, found in zip(viewers, approx, strict=True))
    hits = sum(len({f.row for f in a} & {f.row for f in b}) for a, b in zip(exact, approx, strict=True))
    assert hits / (5 * len(viewers)) >= 0.9
    assert ivf.recall_at_k(q, 5, index.visible_mask(None), 30) >= 0.9
    assert CorpusIndex.build(index.vectors, ann_above=10_000, nprobe=8).recall_at_k(q, 5, index.shareable, 30) is None


def test_community_batched_equals_one_query_at_a_time_and_the_definition():
    index = _corpus()
    users = index.users
    clusters = {u: i % 4 for i, u in enumerate(users)}
    z = {u: _unit(index.vectors[index.visible_rows(u, [u])].mean(axis=0, keepdims=True))[0] for u in users}
    retriever = CommunityRetriever(index, clusters, z, user_weight=0.5)
    rng = np.random.default_rng(3)
    asked = [users[i] for i in rng.integers(0, len(users), 50)]
    q = _unit(rng.standard_normal((50, 16)))
    batched = retriever.retrieve_many(asked, q, 3)
    for user, qi, found in zip(asked, q, batched, strict=True):
        pool = index.visible_rows(user, [v for v in users if clusters[v] == clusters[user]])
        cos = index.vectors[pool] @ qi
        short = pool[np.argsort(-cos, kind="stable")[:30]]
        owners = [index.user_ids[r] for r in short]
        combined = index.vectors[short] @ qi + 0.5 * np.array([z[o] @ z[user] for o in owners])
        expected = short[np.argsort(-combined, kind="stable")[:3]]
        assert [f.row for f in found] == expected.tolist()
        assert [f.row for f in retriever.retrieve(user, qi, 3)] == expected.tolist()


def _write_task(con, index: ProfileIndex) -> None:
    n = len(index.doc_ids)
    order = np.random.default_rng(4).permutation(n)  # stored in no particular order
    docs = pd.DataFrame({"task": "T", "user_id": list(index.user_ids), "doc_id": list(index.doc_ids),
                         "position": np.arange(n) % 20, "text": [f"text of {d}" for d in index.doc_ids],
                         "fields_json": "{}"}).iloc[order]  # fmt: skip
    replace_rows(con, "profile_documents", docs, {"task": "T"})
    emb = pa.table({"task": ["T"] * n, "user_id": docs["user_id"].tolist(), "doc_id": docs["doc_id"].tolist(),
                    "embedding": matrix_to_column(index.vectors[order])})  # fmt: skip
    replace_rows(con, "document_embeddings", emb, {"task": "T"})
    sharing = pd.DataFrame({"task": "T", "user_id": index.users, "share": [int(u[1:]) % 3 != 0 for u in index.users],
                            "source": "record"})  # fmt: skip
    replace_rows(con, "user_sharing", sharing, {"task": "T"})
    private = [i for i in range(n) if i % 7 == 0]
    vis = pd.DataFrame({"task": "T", "user_id": [index.user_ids[i] for i in private],
                        "doc_id": [index.doc_ids[i] for i in private], "visibility": "private"})  # fmt: skip
    replace_rows(con, "document_visibility", vis, {"task": "T"})


def test_index_read_from_duckdb_in_batches_equals_the_definition(monkeypatch):
    import prag_models.methods.task_tables as tt

    index = _corpus(n_users=12, per=20)
    con = duckdb.connect()
    _write_task(con, index)
    monkeypatch.setattr(tt, "iter_batches", lambda c, sql, params: c.sql(sql, params=params).to_arrow_reader(37))
    read = read_profile_index(con, "T", default_share=True)
    assert list(read.doc_ids) == list(index.doc_ids) and list(read.user_ids) == list(index.user_ids)
    np.testing.assert_array_equal(read.vectors, index.vectors)
    np.testing.assert_array_equal(read.shareable, index.shareable)
    texts = read.texts
    texts.block_rows = 50  # blocks of whole users (20 documents each)
    assert [texts[i] for i in range(len(texts))] == [f"text of {d}" for d in index.doc_ids]
    assert texts.blocks_read == 6
    eager, docs = profile_index(con, "T", default_share=True)
    assert list(eager.texts) == docs["text"].tolist() == [f"text of {d}" for d in index.doc_ids]


def test_opting_out_removes_only_those_users_documents():
    index = _corpus(n_users=6, per=3)
    out = index.with_opted_out(["u001", "nobody"])
    assert not out.shareable[out.visible_rows("u001", ["u001"])].any()
    changed = np.flatnonzero(out.shareable != index.shareable)
    assert {index.user_ids[i] for i in changed} == {"u001"}
    with pytest.raises(ValueError, match="shape"):
        ProfileIndex(["a"], ["u"], ["t"], np.ones((1, 2), dtype=np.float32), np.ones(2, dtype=bool))


def test_two_stage_small_pools_scored_directly_agree_with_the_ivf_lists(monkeypatch):
    from prag_models.methods import clusterrag

    index = _corpus(n_users=10, per=30)
    rows = np.arange(len(index.doc_ids))
    small = clusterrag.cluster_documents(index, rows, 2)
    assert small.ivf is None and small.sizes.sum() == len(rows)
    monkeypatch.setattr(clusterrag, "IVF_MIN_POOL", 1)
    listed = clusterrag.index_clusters(index, rows, small.labels)
    assert listed.ivf is not None
    np.testing.assert_allclose(listed.centroids, small.centroids)
    for q in _unit(np.random.default_rng(5).standard_normal((30, 16))):
        a, cost_a = clusterrag.retrieve_two_stage(index, small, q, 4, 2)
        b, cost_b = clusterrag.retrieve_two_stage(index, listed, q, 4, 2)
        assert [r.row for r in a] == [r.row for r in b] and cost_a == cost_b
        np.testing.assert_allclose([r.score for r in a], [r.score for r in b], rtol=1e-5)


def test_cfrag_histories_from_batches_equal_the_whole_table_reading():
    from prag_models.methods.cfrag.candidates import user_histories
    from prag_models.methods.cfrag.tables import history_version, task_histories
    from prag_models.storage.hashing import data_version
    from prag_models.storage.store import column_to_matrix, read_rows

    index = _corpus(n_users=8, per=6)
    con = duckdb.connect()
    _write_task(con, index)
    con.execute("CREATE OR REPLACE TABLE document_embeddings AS SELECT e.task, e.user_id, e.doc_id, p.position, "
                "'m' AS model_id, e.doc_id || 'h' AS content_hash, e.embedding FROM document_embeddings e "
                "JOIN profile_documents p USING (task, user_id, doc_id)")  # fmt: skip
    con.execute("CREATE TABLE lamp_samples AS SELECT 'T' task, 'u999' user_id")
    users, histories, matrix, keys = task_histories(con, "T", True)
    docs = read_rows(con, "document_embeddings", {"task": "T"}, order_by="user_id, position")
    shaping = dict(zip(zip(index.owners, index.doc_ids, strict=True), index.shareable, strict=True))
    docs = docs[[shaping[(u, d)] for u, d in zip(docs["user_id"], docs["doc_id"], strict=True)]]  # docs/privacy.md
    assert len(docs) < len(index.doc_ids)
    assert users == sorted({*docs["user_id"], "u999"})
    assert {u: list(h) for u, h in histories.items()} == user_histories(docs["user_id"].tolist())
    np.testing.assert_array_equal(matrix, column_to_matrix(docs["embedding"].tolist()))
    cols = ["user_id", "doc_id", "position", "model_id", "content_hash"]
    assert history_version(keys) == data_version(docs[cols])
