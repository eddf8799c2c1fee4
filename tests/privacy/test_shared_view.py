"""The shared view (prag_models/privacy/shareable.py, issue 51) without a model: what every cross-user artefact reads.
Each test builds two inputs that differ only in documents others may not see and checks that what others get is the
same: the approximate corpus index (trained at a small threshold: at scale it is 500 k documents), the z_u table,
and the view a feedback candidate or a tuning trial reads."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from prag_models.data.truth import Truth
from prag_models.methods.profiles import ProfileIndex
from prag_models.methods.vector_index import CorpusIndex
from prag_models.privacy.shareable import SharedView, shared_rows, shared_truth, shared_view
from prag_models.stages.users import user_embedding_rows


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _corpus(seed: int, n_hidden: int) -> tuple[np.ndarray, np.ndarray]:
    """600 shareable vectors (the same for every seed) followed by n_hidden non-shareable ones drawn with ``seed``."""
    shared = _unit(np.random.default_rng(0).normal(size=(600, 16)))
    hidden = _unit(np.random.default_rng(seed).normal(size=(n_hidden, 16)) + 3.0)  # far off: they would pull lists
    flags = np.r_[np.ones(600, dtype=bool), np.zeros(n_hidden, dtype=bool)]
    return np.vstack([shared, hidden]), flags


def test_the_approximate_index_is_trained_on_shareable_rows_only() -> None:
    """Defect 5: the IVF lists' centroids, their number and the exact/IVF choice come from the shareable rows; other
    users' results (the shareable mask) are the same whatever the private rows are, changed or added."""
    queries = _unit(np.random.default_rng(9).normal(size=(20, 16)))
    built = []
    for seed, n_hidden in ((1, 300), (2, 300), (3, 900)):
        vectors, flags = _corpus(seed, n_hidden)
        index = CorpusIndex.build(vectors, ann_above=500, nprobe=4, shareable=flags)
        built.append((index, index.search(queries, 5, flags)))  # what every other user may see
    first = built[0][0]
    assert first.kind == "ivf24,sq8,nprobe4"  # √600 lists, not √(600 + hidden)
    centroids = first.quantizer.reconstruct_n(0, first.ivf.nlist)
    for index, (scores, rows) in built[1:]:
        assert index.kind == first.kind
        np.testing.assert_array_equal(index.quantizer.reconstruct_n(0, index.ivf.nlist), centroids)
        np.testing.assert_array_equal(rows, built[0][1][1])
        np.testing.assert_array_equal(scores, built[0][1][0])
    # the owner still finds its own private rows
    vectors, flags = _corpus(1, 300)
    own = flags.copy()
    own[600:] = True
    _, rows = built[0][0].search(vectors[600:605], 1, own)
    assert set(rows[:, 0]) <= set(range(600, 900))
    # teeth: trained on every row, the same corpora give other lists
    naive = [CorpusIndex.build(_corpus(s, n)[0], ann_above=500, nprobe=4) for s, n in ((1, 300), (3, 900))]
    assert naive[0].kind != naive[1].kind


def test_exact_search_while_the_shareable_rows_are_few() -> None:
    """Whether others get exact search depends on the shareable rows only, not on how many private rows there are."""
    vectors, flags = _corpus(1, 900)
    assert CorpusIndex.build(vectors, ann_above=600, nprobe=4, shareable=flags).kind == "flat"
    assert CorpusIndex.build(vectors, ann_above=600, nprobe=4).kind != "flat"
    with pytest.raises(ValueError, match="expected"):
        shared_rows(flags[:10], len(vectors))


def _index() -> ProfileIndex:
    """u1 shares its two documents; u2 has one shareable and one private document."""
    vectors = _unit(np.eye(4, dtype=np.float32) + 0.1)
    return ProfileIndex(["a", "b", "c", "d"], ["u1", "u1", "u2", "u2"], ["ta", "tb", "tc", "td"], vectors,
                        np.array([True, True, True, False]))  # fmt: skip


def test_the_shared_view_hides_a_users_own_private_documents_from_it_too() -> None:
    """Defects 3 and 6: a feedback candidate or a tuning trial reads as nobody's own: u2's private row is in no
    list, u2's own included; rows keep their numbers, so candidates still index the same vectors and prompts."""
    index = _index()
    assert list(index.visible_rows("u2", ["u2"])) == [2, 3]
    view = shared_view(index)
    assert list(view.visible_rows("u2", ["u1", "u2"])) == [0, 1, 2]
    assert list(view.visible_mask("u2")) == [True, True, True, False]
    assert view.shares_all("u2") and view.vectors is index.vectors and view.doc_ids[3] == "d"
    assert list(view.with_opted_out(["u1"]).visible_rows("u1", ["u1", "u2"])) == [2]
    assert isinstance(shared_view(view), SharedView) and shared_view(view).index is index

    class Later(ProfileIndex):  # a read keyed by the viewer, added to the index after the view was written
        def own_rows_of(self, viewer: str | None, user: str) -> list[int]:
            return list(self.visible_rows(viewer, [user]))

    later = Later(index.doc_ids, index.user_ids, index.texts, index.vectors, index.shareable)
    assert later.own_rows_of("u2", "u2") == [2, 3] and shared_view(later).own_rows_of("u2", "u2") == [2]


def test_the_truth_of_a_search_counts_shareable_documents_only() -> None:
    """A tuning trial's capped recall and NDCG do not count a sample's relevant documents hidden from the view."""
    truth = Truth({"s1": {"a", "d"}, "s2": {"d"}}, None, {"s1": "x", "s2": "y"})
    assert shared_truth(truth, ["a", "b", "c"]).relevant == {"s1": {"a"}, "s2": set()}
    no_relevance = Truth(None, {"a": "x"}, {"s1": "x"})
    assert shared_truth(no_relevance, ["a"]) is no_relevance


def _users_table(private_only: dict[str, list[list[float]]]) -> duckdb.DuckDBPyConnection:
    """A task's document and query vectors: u1 and u2 share, u3 has only private documents and asks a question,
    and the users of ``private_only`` have only private documents and no question."""
    con = duckdb.connect()
    docs = [("u1", "d1", [1, 0, 0]), ("u1", "d2", [0.9, 0.1, 0]), ("u2", "d3", [0, 1, 0]), ("u3", "d4", [0, 0, 1])]
    docs += [(u, f"{u}-{i}", v) for u, vs in private_only.items() for i, v in enumerate(vs)]
    con.execute("CREATE TABLE document_embeddings (task VARCHAR, user_id VARCHAR, doc_id VARCHAR, embedding FLOAT[3])")
    con.executemany("INSERT INTO document_embeddings VALUES ('T', ?, ?, ?)", docs)
    con.execute("CREATE TABLE query_embeddings (task VARCHAR, sample_id VARCHAR, user_id VARCHAR, embedding FLOAT[3])")
    con.executemany("INSERT INTO query_embeddings VALUES ('T', ?, ?, ?)",
                    [("q1", "u1", [1, 0, 0]), ("q2", "u2", [0, 1, 0]), ("q3", "u3", [0.5, 0.5, 0])])  # fmt: skip
    con.execute("CREATE TABLE user_sharing (task VARCHAR, user_id VARCHAR, share BOOLEAN, source VARCHAR)")
    con.executemany("INSERT INTO user_sharing VALUES ('T', ?, true, 'record')", [(u,) for u in ("u1", "u2", "u3")])
    con.execute("CREATE TABLE document_visibility (task VARCHAR, user_id VARCHAR, doc_id VARCHAR, visibility VARCHAR)")
    private = [("u3", "d4")] + [(u, f"{u}-{i}") for u, vs in private_only.items() for i in range(len(vs))]
    con.executemany("INSERT INTO document_visibility VALUES ('T', ?, ?, 'private')", private)
    return con


def test_a_user_known_only_from_private_documents_gets_no_user_embedding() -> None:
    """Defect 4: such a user has no z_u (so no cluster, no place in anyone's neighbour list); a user whose documents
    are all private but who asks questions is placed by them; the others' rows do not depend on either."""
    plain = user_embedding_rows(_users_table({}), "T")[0].to_pandas()
    with_hidden_user, stats = user_embedding_rows(_users_table({"u9": [[1, 0, 0], [0.9, 0.1, 0]]}), "T")
    frame = with_hidden_user.to_pandas()
    assert sorted(frame["user_id"]) == ["u1", "u2", "u3"] and stats["unplaced_users"] == 1
    assert frame["embedding"].map(list).tolist() == plain["embedding"].map(list).tolist()
    u3 = frame.set_index("user_id").loc["u3"]
    assert bool(u3["cold_start"]) and np.allclose(u3["embedding"], [0.5, 0.5, 0])  # its question, not d4
