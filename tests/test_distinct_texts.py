"""Every retrieval method shows a text once: a ranking with a text repeated (a retweet, pasted boilerplate) gives the
prompt fewer documents than another method's, and the comparison of the two is no longer like for like."""

import numpy as np
import pytest

from prag_models.methods import baselines, clusterrag
from prag_models.methods.cfrag.candidates import cosine_scorer, per_user_top_k
from prag_models.methods.cfrag.variants import top_final
from prag_models.methods.community import CommunityRetriever
from prag_models.methods.profiles import ProfileIndex, text_keys_of

#: Two users; "same words" is written four times (by both), closest to the query each time.
TEXTS = ["same words", "same words", "about x", "about y", "same words", "other x", "same words", "far away"]
USERS = ["u", "u", "u", "u", "v", "v", "v", "v"]


def _unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


def _vectors():
    by_text = {"same words": [1, 0, 0], "about x": [0.9, 0.3, 0], "about y": [0.5, 0.8, 0], "other x": [0.8, 0, 0.5],
               "far away": [0, 0, 1]}  # fmt: skip
    return np.stack([_unit(by_text[t]) for t in TEXTS])


def _index(keys: bool) -> ProfileIndex:
    return ProfileIndex([f"d{i}" for i in range(8)], USERS, TEXTS, _vectors(), np.ones(8, dtype=bool),
                        text_keys_of(TEXTS) if keys else None)  # fmt: skip


QUERY = _unit([1, 0, 0])


def _rankings(index: ProfileIndex) -> dict[str, list]:
    rng = np.random.default_rng(0)
    community = CommunityRetriever(index, {"u": 0, "v": 0}, {"u": _unit([1, 0]), "v": _unit([1, 0.1])}, 0.5)
    clusters = clusterrag.index_clusters(index, index.visible_rows("u", ["u", "v"]), np.zeros(8, dtype=np.int64))
    candidates = per_user_top_k(index, "u", ["u", "v"], 2, cosine_scorer(index, QUERY))
    return {
        "dense": baselines.retrieve_dense(index, "u", QUERY, 3),
        "dense_global": baselines.retrieve_dense_global(index, ["u"], QUERY[None], 3)[0],
        "random": baselines.retrieve_random(index, "u", 3, rng),
        "recency": baselines.retrieve_recency(index, "v", 3),
        "bm25": baselines.retrieve_bm25(index, "u", "same words", 3),
        "hybrid": clusterrag.retrieve_profile_mode(index, "hybrid", "u", ["v"], QUERY, 3),
        "two_stage": clusterrag.retrieve_two_stage(index, clusters, QUERY, 3, 1)[0],
        "community": community.retrieve("u", QUERY, 3),
        "cfrag_final": top_final(candidates, np.asarray([c.score for c in candidates]), 3, index),
    }


def test_every_method_fills_its_k_with_distinct_texts():
    index = _index(keys=True)
    for method, found in _rankings(index).items():
        texts = [TEXTS[r.row] for r in found]
        assert len(texts) == 3 and len(set(texts)) == 3, (method, texts)
        assert [r.score for r in found] == sorted((r.score for r in found), reverse=True) or method == "random"


def test_without_text_keys_a_repeated_text_fills_the_ranking():
    """The control: the same index without keys repeats "same words" — the rule above is what removes it."""
    found = _rankings(_index(keys=False))
    assert [TEXTS[r.row] for r in found["dense_global"]] == ["same words"] * 3
    assert [TEXTS[r.row] for r in found["community"]].count("same words") >= 2


def test_distinct_keeps_the_first_of_each_text_in_ranking_order():
    index = _index(keys=True)
    assert index.distinct([4, 0, 2, 6, 3], 3).tolist() == [0, 2, 4]
    assert index.distinct([4, 0, 2]).tolist() == [0, 2]
    # a ranking longer than DISTINCT_DEPTH x k whose head holds one text: the second text is found past the head
    assert index.distinct([0, 1, 4, 6] * 5 + [2], 2).tolist() == [0, 20]
    with pytest.raises(ValueError, match="text_keys has shape"):
        ProfileIndex(["a"], ["u"], ["t"], _vectors()[:1], None, np.zeros(2, dtype=np.uint64))
