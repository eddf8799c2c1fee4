"""Like with like (issue 48): every method an LLM comparison prompts shows the same number of distinct texts for a
sample — two-stage widens its search until it holds k distinct texts, and a sample whose own profile holds fewer
than k texts is compared at the count every method can give (docs/methods.md §0)."""

import duckdb
import numpy as np
import pytest

from prag_models.methods import baselines, clusterrag
from prag_models.methods.profiles import ProfileIndex, Retrieved, text_keys_of
from prag_models.stages.generation import common_count, retrieved_texts


def _unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


BY_TEXT = {"same words": [1, 0, 0], "about x": [0.9, 0.3, 0], "about y": [0.5, 0.8, 0], "other x": [0.8, 0, 0.5],
           "far away": [0, 0, 1]}  # fmt: skip
QUERY = _unit([1, 0, 0])


def _index(texts: list[str], users: list[str]) -> ProfileIndex:
    vectors = np.stack([_unit(BY_TEXT[t]) for t in texts])
    return ProfileIndex([f"d{i}" for i in range(len(texts))], users, texts, vectors, np.ones(len(texts), dtype=bool),
                        text_keys_of(texts))  # fmt: skip


# -- two-stage: the first cluster pass holds k documents but fewer than k texts --------------------------------------

#: The best cluster (0) is four copies of one text: four documents, one text.
TEXTS = ["same words", "same words", "about x", "about y", "same words", "other x", "same words", "far away"]
LABELS = np.asarray([0, 0, 1, 1, 0, 1, 0, 1], dtype=np.int64)


@pytest.mark.parametrize("ivf", [False, True], ids=["flat", "ivf"])
def test_two_stage_widens_until_it_holds_k_distinct_texts(monkeypatch, ivf):
    if ivf:
        monkeypatch.setattr(clusterrag, "IVF_MIN_POOL", 0)
    index = _index(TEXTS, ["u"] * 4 + ["v"] * 4)
    clusters = clusterrag.index_clusters(index, index.visible_rows("u", ["u", "v"]), LABELS)
    assert (clusters.ivf is not None) == ivf
    found, scored = clusterrag.retrieve_two_stage(index, clusters, QUERY, 3, 1)
    assert [TEXTS[r.row] for r in found] == ["same words", "about x", "other x"]  # flat search's top 3 texts
    assert scored == 8 + 2  # both clusters opened: their documents and the two centroids


def test_two_stage_widens_only_as_far_as_needed():
    """A text the best cluster repeats does not open further clusters when the cluster already holds k texts."""
    index = _index(TEXTS, ["u"] * 4 + ["v"] * 4)
    clusters = clusterrag.index_clusters(index, index.visible_rows("u", ["u", "v"]), LABELS)
    found, scored = clusterrag.retrieve_two_stage(index, clusters, QUERY, 1, 1)
    assert [TEXTS[r.row] for r in found] == ["same words"] and scored == 4 + 2


def test_two_stage_ivf_searches_past_a_text_that_fills_the_depth(monkeypatch):
    """One cluster whose best DISTINCT_DEPTH x k documents are one text: the search goes deeper than that depth."""
    monkeypatch.setattr(clusterrag, "IVF_MIN_POOL", 0)
    texts = ["same words"] * 25 + ["about x"]
    index = _index(texts, ["u"] * 26)
    clusters = clusterrag.index_clusters(index, index.visible_rows("u", ["u"]), np.zeros(26, dtype=np.int64))
    found, _ = clusterrag.retrieve_two_stage(index, clusters, QUERY, 2, 1)
    assert [texts[r.row] for r in found] == ["same words", "about x"]


# -- the own profile: fewer than k distinct texts --------------------------------------------------------------------

#: u's own profile holds two texts in three documents; w's holds three; v's documents are shared with everyone.
OWN_TEXTS = ["same words", "same words", "about x", "same words", "about x", "about y", "other x", "far away"]
OWN_USERS = ["u", "u", "u", "w", "w", "w", "v", "v"]


def _con(found: dict[tuple[str, str], list[Retrieved]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE profile_documents (task VARCHAR, user_id VARCHAR, doc_id VARCHAR, text VARCHAR, "
                "fields_json VARCHAR)")  # fmt: skip
    con.executemany("INSERT INTO profile_documents VALUES ('T', ?, ?, ?, '{}')",
                    [[u, f"d{i}", t] for i, (u, t) in enumerate(zip(OWN_USERS, OWN_TEXTS, strict=True))])  # fmt: skip
    con.execute("CREATE TABLE baseline_retrievals (task VARCHAR, method VARCHAR, sample_id VARCHAR, user_id VARCHAR, "
                "rank INTEGER, doc_id VARCHAR, source_user_id VARCHAR, score DOUBLE)")  # fmt: skip
    rows = [("T", m, s, s, rank, r.doc_id, r.source_user_id, r.score)
            for (m, s), ranking in found.items() for rank, r in enumerate(ranking, 1)]  # fmt: skip
    con.executemany("INSERT INTO baseline_retrievals VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return con


def test_a_thin_own_profile_sets_the_count_every_method_shows():
    index = _index(OWN_TEXTS, OWN_USERS)
    found = {}
    for user in ("u", "w"):  # the sample of user u has id "u"
        found["dense", user] = baselines.retrieve_dense(index, user, QUERY, 3)
        found["dense_global", user] = baselines.retrieve_dense_global(index, [user], QUERY[None], 3)[0]
    assert len(found["dense", "u"]) == 2 and len(found["dense_global", "u"]) == 3  # u's profile gives two texts
    docs = retrieved_texts(_con(found), "T", ("dense", "dense_global"))
    assert docs["dense"]["u"] == ["same words", "about x"]
    assert docs["dense_global"]["u"] == ["same words", "about x"]  # cut to the two u's own profile can give
    assert len(docs["dense"]["w"]) == len(docs["dense_global"]["w"]) == 3  # a full profile: k texts each
    # only the methods compared count: dense_global alone keeps its three texts
    assert len(retrieved_texts(_con(found), "T", ("dense_global",))["dense_global"]["u"]) == 3


def test_common_count_cuts_each_sample_to_its_fewest_and_ignores_a_missing_ranking():
    docs = {"a": {"s1": ["x", "y", "z"], "s2": ["x", "y", "z"]}, "b": {"s1": ["p"], "s2": ["p", "q", "r"]},
            "c": {"s2": ["m", "n"]}}  # fmt: skip
    assert common_count(docs) == {"a": {"s1": ["x"], "s2": ["x", "y"]}, "b": {"s1": ["p"], "s2": ["p", "q"]},
                                  "c": {"s2": ["m", "n"]}}  # fmt: skip
