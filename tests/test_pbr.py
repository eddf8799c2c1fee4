"""PBR maths (docs/methods.md §4): anchor graph, stationary distribution, fusion, P-PRF parsing, QE baselines,
evaluation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from prag_models.config.settings import PbrSettings, Settings
from prag_models.data.personabench import RetrievalQuestion, Segment
from prag_models.llm.base import Generator
from prag_models.methods import query_expansion as qe
from prag_models.methods.pbr import (
    PbrExpansion,
    anchor_vector,
    build_anchor_graph,
    faiss_top_k,
    fusion_weights,
    generate_expansions,
    parse_candidates,
    pbr_query_vectors,
    row_normalize,
    stationary_distribution,
    top_k_prf,
)
from prag_models.methods.pbr_eval import EmbeddingCache, evaluate_retrieval, retrieve_rankings

S3 = np.sqrt(3) / 2
# Unit vectors at 0, 30, 90 and 180 degrees: cos(0,1) = .866, cos(1,2) = .5, cos(0,2) = 0, cos(0,3) = -1.
EMB = np.array([[1.0, 0.0], [S3, 0.5], [0.0, 1.0], [-1.0, 0.0]])


def test_graph_threshold_topk_and_self_loop() -> None:
    a = build_anchor_graph(EMB, theta=0.4, k2=2).toarray()
    expected = np.array([
        [1.0, S3, 0.0, 0.0],  # 1 is the only neighbour >= .4
        [S3, 1.0, 0.0, 0.0],  # 0 (.866) and 2 (.5) qualify; k2 = 2 keeps self + the best one
        [0.0, 0.5, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],  # nothing >= .4: self-loop only
    ])
    np.testing.assert_allclose(a, expected, atol=1e-12)
    wider = build_anchor_graph(EMB, theta=0.4, k2=3).toarray()
    np.testing.assert_allclose(wider[1], [S3, 1.0, 0.5, 0.0], atol=1e-12)
    stricter = build_anchor_graph(EMB, theta=0.6, k2=3).toarray()
    np.testing.assert_allclose(stricter[1], [S3, 1.0, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(stricter[2], [0.0, 0.0, 1.0, 0.0], atol=1e-12)
    only_self = build_anchor_graph(EMB, theta=0.0, k2=1).toarray()
    np.testing.assert_allclose(only_self, np.eye(4), atol=1e-12)
    with pytest.raises(ValueError):
        build_anchor_graph(EMB, theta=0.5, k2=0)


def test_graph_uses_cosine_of_unnormalised_vectors() -> None:
    a = build_anchor_graph(EMB * np.array([[2.0], [3.0], [1.0], [5.0]]), theta=0.4, k2=2).toarray()
    assert a[0, 1] == pytest.approx(S3)
    assert a[0, 0] == pytest.approx(1.0)


def test_row_normalisation() -> None:
    p = row_normalize(build_anchor_graph(EMB, theta=0.4, k2=2)).toarray()
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    np.testing.assert_allclose(p[0], [1 / (1 + S3), S3 / (1 + S3), 0, 0])
    np.testing.assert_allclose(p[2], [0, 0.5 / 1.5, 1 / 1.5, 0])


def test_stationary_distribution_two_state_chain() -> None:
    a, b = 0.3, 0.2
    p = np.array([[1 - a, a], [b, 1 - b]])
    pi = stationary_distribution(p, iters=500, tol=1e-14)
    np.testing.assert_allclose(pi, [b / (a + b), a / (a + b)], atol=1e-10)
    # the code defaults (50 iterations, tol 1e-6) are close enough on this fast-mixing chain
    np.testing.assert_allclose(stationary_distribution(p), [0.4, 0.6], atol=1e-6)


def test_stationary_distribution_three_state_sparse() -> None:
    from scipy.sparse import csr_matrix

    p = np.array([[0.5, 0.5, 0.0], [0.25, 0.5, 0.25], [0.0, 0.5, 0.5]])
    pi = stationary_distribution(csr_matrix(p), iters=1000, tol=1e-14)
    np.testing.assert_allclose(pi, [0.25, 0.5, 0.25], atol=1e-10)  # reversible chain: pi_i p_ij = pi_j p_ji


def test_damping_option() -> None:
    p = np.array([[0.7, 0.3], [0.2, 0.8]])
    d = 0.5
    pi = stationary_distribution(p, iters=500, tol=1e-14, damping=d)
    closed = np.linalg.solve(np.eye(2) - d * p.T, np.full(2, (1 - d) / 2))
    np.testing.assert_allclose(pi, closed / closed.sum(), atol=1e-10)
    assert not np.allclose(pi, [0.4, 0.6])
    with pytest.raises(ValueError):
        stationary_distribution(p, damping=1.0)


def test_anchor_on_symmetric_graph_is_degree_weighted_mean() -> None:
    emb = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]])
    settings = PbrSettings(theta=0.0, k2=4, pagerank_iters=2000, pagerank_tol=1e-14)
    g, pi = anchor_vector(emb, settings)
    degree = (emb @ emb.T).sum(axis=1)  # full symmetric graph: pi_i proportional to the weighted degree
    np.testing.assert_allclose(pi, degree / degree.sum(), atol=1e-8)
    np.testing.assert_allclose(g, (degree / degree.sum()) @ emb, atol=1e-6)


def test_fusion_weights_and_method_vectors() -> None:
    q, g = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])
    f, r = np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0])
    w1, w2 = fusion_weights((q + g) / 2, f, r)
    assert w1 == pytest.approx(1 + 1 / np.sqrt(2))
    assert w2 == pytest.approx(1.0)
    vecs = pbr_query_vectors(q, g, f, r)
    np.testing.assert_allclose(vecs["base"], [1, 0, 0])
    np.testing.assert_allclose(vecs["pbr"], [1 + 1 + 1 / np.sqrt(2), 1, 1], rtol=1e-6)
    np.testing.assert_allclose(vecs["pbr_wo_anchor"], [3, 0, 1])  # w1 = 1 + cos(q, f) = 2, w2 = 1
    np.testing.assert_allclose(vecs["pbr_wo_prf"], [1, 1, 0])
    empty = pbr_query_vectors(q, g, np.zeros(3), r, ["pbr"])["pbr"]  # no utterances: weight 1, term 0
    np.testing.assert_allclose(empty, [1, 1, 1])
    with pytest.raises(ValueError):
        pbr_query_vectors(q, g, None, None, ["pbr"])
    with pytest.raises(ValueError):
        pbr_query_vectors(q, g, f, r, ["nope"])


@pytest.mark.parametrize(
    ("text", "items", "fallback"),
    [
        ('{"candidates": ["one two", "three"]}', ["one two", "three"], "json"),
        ('Sure!\n```json\n{"candidates": ["a b", "c"]}\n```\nHope it helps', ["a b", "c"], "json_object"),
        ('{\n  "candidates": [\n    "first one",\n    "second one",\n  ]\n}', ["first one", "second one"], "lines"),
        ("1. I love hiking\n2) Mountains are great\n- Also lakes", ["I love hiking", "Mountains are great",
                                                                  "Also lakes"], "lines"),
        ('{"answer": ["only list"]}', ["only list"], "json"),
        ("   \n", [], "empty"),
    ],
)
def test_parse_candidates_fallbacks(text: str, items: list[str], fallback: str) -> None:
    assert parse_candidates(text) == (items, fallback)


def test_parse_candidates_keeps_at_most_m() -> None:
    out, how = parse_candidates('{"candidates": ["a", "b", "c"]}', m=2)
    assert out == ["a", "b"] and how == "json"


class ScriptedGenerator(Generator):
    """Replies by prompt kind; records prompts."""

    model_id = "scripted"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Utterance prompts get a fenced JSON reply, others a reasoning text."""
        self.prompts.extend(prompts)
        return ['```json\n{"candidates": ["I hike a lot", "Trails are fun"]}\n```' if "JSON only" in p
                else "Step 1: look. Step 2: answer." for p in prompts]


def test_generate_expansions_records_fallback_and_fits_history() -> None:
    gen = ScriptedGenerator()
    docs = ["alpha " * 50, "beta " * 50]
    out = generate_expansions(gen, [("q1", "Where do I hike?", docs)], m=10, max_history_tokens=20)
    exp = out["q1"]
    assert exp.pseudo_utterances == ("I hike a lot", "Trails are fun")
    assert exp.reasoning == "Step 1: look. Step 2: answer."
    assert (exp.source, exp.parse_fallback) == ("generate", "json_object")
    assert len(gen.prompts) == 2 and all("Where do I hike?" in p for p in gen.prompts)
    assert "25 words" in gen.prompts[0] and '{"candidates"' in gen.prompts[0]
    assert gen.prompts[0].count("alpha") == 10 and gen.prompts[0].count("beta") == 10


def test_top_k_helpers() -> None:
    docs = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]], dtype=np.float32)
    q = np.array([1.0, 0.2], dtype=np.float32)
    assert top_k_prf(q, docs, 2).tolist() == [0, 2]
    assert faiss_top_k(docs, np.stack([q, [0.0, 1.0]]), 5).tolist() == [[0, 2, 1], [1, 2, 0]]


def test_qe_prompts_and_query_texts() -> None:
    for method in qe.QE_METHODS:
        assert "Where do I live?" in qe.qe_prompt(method, "Where do I live?", ["doc A"])
    assert "doc A" in qe.qe_prompt("thinkqe", "q", ["doc A"])
    with pytest.raises(ValueError):
        qe.qe_prompt("bm25", "q")
    assert qe.qe_query_texts("hyde", "q", "passage") == ["q\npassage"]
    assert qe.qe_query_texts("cot", "q", "  ") == ["q"]
    assert qe.qe_query_texts("mill", "q", "['a: x', 'b: y']") == ["q", "q\na: x", "q\nb: y"]
    assert qe.parse_list('["a", "b"]') == (["a", "b"], "python")
    assert qe.parse_list("1. a\n2. b") == (["a", "b"], "lines")
    assert qe.parse_list("") == ([], "empty")


class BagOfWords:
    """Deterministic toy embedder: L2-normalised counts over a fixed vocabulary."""

    vocab = ("hike", "mountain", "cook", "pasta", "dog", "cat", "city", "seattle")
    dim = len(vocab)

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Counts of vocabulary words, normalised (zero vectors stay zero)."""
        self.calls += 1
        out = np.array([[t.lower().count(w) for w in self.vocab] for t in texts], dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def _toy() -> tuple[list[RetrievalQuestion], dict[str, list[Segment]], dict[str, PbrExpansion]]:
    segs = {"u": [Segment("u", f"s{i}", t) for i, t in enumerate(
        ["I hike the mountain", "pasta cook night", "my dog and cat", "Seattle city life", "mountain hike again"])]}
    qs = [
        RetrievalQuestion("toy", "u", "q1", "Which mountain do I hike?", [["s0", "s4"]], "A"),
        RetrievalQuestion("toy", "u", "q2", "What do I cook?", [["s1"], ["s2"]], "B"),
    ]
    exps = {"q1": PbrExpansion(("hike hike",), "mountain"), "q2": PbrExpansion(("pasta", "dog"), "cook cat")}
    return qs, segs, exps


def test_evaluate_retrieval_table() -> None:
    qs, segs, exps = _toy()
    emb = BagOfWords()
    settings = PbrSettings(theta=0.3, k2=2, top_k=5)
    methods = ["base", "pbr", "pbr_wo_anchor", "pbr_wo_prf", "hyde"]
    df = evaluate_retrieval(qs, segs, emb, methods, exps, settings, qe_expansions={"hyde": {"q1": "hike", "q2": ""}})
    columns = ["dataset", "method", "category", "metric", "k", "value", "n_questions", "ci_low", "ci_high"]
    assert list(df.columns) == columns
    assert set(df.category) == {"A", "B", "Overall"} and set(df.k) == {1, 3, 5}  # K = 10 > top_k dropped
    overall = df[(df.category == "Overall")].set_index(["method", "metric", "k"])
    # q1: s0 first (recall 1); q2: s1 first, 1 of its 2 gold answers (recall .5)
    assert overall.loc[("base", "recall", 1), "value"] == pytest.approx(0.75)
    assert overall.loc[("base", "recall", 1), "n_questions"] == 2
    assert df.value.between(0, 1).all()
    ranks = retrieve_rankings(qs, segs, emb, ["pbr"], exps, settings)
    assert ranks[("pbr", "q2")][:2] == ["s1", "s2"]  # the expansion pulls in the dog/cat session
    with pytest.raises(ValueError, match="needs a P-PRF expansion"):
        evaluate_retrieval(qs, segs, emb, ["pbr"], {}, settings)
    with pytest.raises(ValueError, match="unknown method"):
        evaluate_retrieval(qs, segs, emb, ["magic"], exps, settings)


def test_embedding_cache_embeds_each_text_once() -> None:
    emb = BagOfWords()
    cache = EmbeddingCache(emb)
    first = cache.embed(["hike", "cook", "hike"])
    again = cache.embed(["cook", "hike"])
    assert emb.calls == 1 and np.array_equal(first[1], again[0])


def test_settings_carry_pbr_defaults() -> None:
    pbr = Settings().pbr
    assert (pbr.num_pseudo, pbr.pagerank_iters, pbr.pagerank_tol, pbr.damping) == (10, 50, 1e-6, 0.0)
    assert pbr.expansion_source == "auto"


@pytest.mark.parametrize(
    "bad", [{"k2": 0}, {"theta": 1.5}, {"damping": 1.0}, {"expansion_source": "cache"}, {"top_k": 0},
            {"tuning_folds": 0}, {"anchor_weight": -1.0}, {"reasoning_weight": float("nan")}]
)
def test_invalid_settings_are_refused(bad: dict) -> None:
    from prag_models.methods.pbr import validate_pbr_settings

    with pytest.raises(ValueError, match="pbr\\."):
        validate_pbr_settings(PbrSettings(**bad))
