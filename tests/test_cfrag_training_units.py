"""Unit tests of CFRAG's residual reranker, training that trains, and what the ablation metadata says
(docs/methods.md §2.6–2.8)."""

from __future__ import annotations

import numpy as np
import pytest

from prag_models.config.settings import CfragSettings


def _vectors(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_untrained_residual_reranker_ranks_exactly_like_cosine() -> None:
    from prag_models.methods.cfrag.reranker import rerank_scores
    from prag_models.methods.cfrag.training_set import new_reranker

    model = new_reranker(CfragSettings(reranker_layers=1, reranker_max_length=32), user_dim=8)
    q, d = _vectors(1, 16, 0), _vectors(5, 16, 1)
    base = (d @ q[0]).astype(np.float32)
    scores = rerank_scores(model, ["a query"] * 5, [f"document {i}" for i in range(5)], _vectors(5, 8, 2), base)
    np.testing.assert_allclose(scores, base, atol=1e-6)
    with pytest.raises(ValueError, match="residual reranker needs base"):
        rerank_scores(model, ["q"], ["d"], _vectors(1, 8, 3))


def _learnable_rerank_samples(n: int = 16) -> list:
    """Teacher prefers the candidates whose text names the user's community (a signal cosine does not see)."""
    from prag_models.methods.cfrag.reranker import RerankSample

    rng = np.random.default_rng(0)
    users = {"red": _vectors(1, 8, 10)[0], "blue": _vectors(1, 8, 11)[0]}
    out = []
    for i in range(n):
        who = "red" if i % 2 else "blue"
        texts = [f"a {c} review of item {j}" for j, c in enumerate(["red", "blue", "red", "blue"])]
        teacher = [0.0 if c == who else -3.0 for c in ["red", "blue", "red", "blue"]]
        out.append(RerankSample(f"item {i}", texts, teacher, users[who], list(rng.uniform(0.2, 0.4, size=4))))
    return out


def test_reranker_training_lowers_validation_kl_and_gives_distinct_scores() -> None:
    from prag_models.methods.cfrag.reranker import rerank_scores, train_reranker
    from prag_models.methods.cfrag.training_set import new_reranker

    settings = CfragSettings(
        reranker_layers=1, reranker_max_length=32, train_epochs=8, train_lr=1e-3, validation_share=0.25, seed=0,
        selection_confidence=0,  # the gate has its own tests; here: training can lower the validation KL
    )
    samples = _learnable_rerank_samples()
    fitted = train_reranker(samples, settings, model=new_reranker(settings, user_dim=8))
    history = fitted.history
    assert fitted.validation_samples == 4 and history[0].epoch == 0
    assert fitted.improved and history[fitted.best_epoch].val_kl < history[0].val_kl
    s = samples[0]
    scores = rerank_scores(fitted.model, [s.query] * 4, s.candidates, np.stack([s.user_embedding] * 4), s.base_scores)
    assert len(set(np.round(scores, 6))) == 4  # no collapse: every candidate its own score
    assert fitted.summary()["improved"] is True


def test_a_frozen_cross_encoder_reads_each_pair_once_and_keeps_its_weights() -> None:
    """reranker_encoder_lr = 0 (the default): the pair vectors are computed once, the epochs train the heads only,
    the cross-encoder's weights are those it started with; at 2e-5 it reads the pairs every epoch and moves."""
    import torch

    from prag_models.methods.cfrag.reranker import PersonalizedReranker, train_reranker
    from prag_models.methods.cfrag.training_set import new_reranker

    samples = _learnable_rerank_samples()
    pairs = sum(len(s.candidates) for s in samples)
    for lr in (0.0, 2e-5):
        settings = CfragSettings(reranker_layers=1, reranker_max_length=32, train_epochs=3, seed=0,
                                 selection_confidence=0, reranker_encoder_lr=lr)  # fmt: skip
        model = new_reranker(settings, user_dim=8)
        before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
        read = []
        original = PersonalizedReranker.pair_vectors

        def counting(self, queries, docs, _read=read, _original=original):  # noqa: ANN001, ANN202
            _read.append(len(queries))
            return _original(self, queries, docs)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(PersonalizedReranker, "pair_vectors", counting)
            fitted = train_reranker(samples, settings, model=model)
        assert len(fitted.history) > 1
        moved = any(not torch.equal(before[k], v) for k, v in fitted.model.encoder.state_dict().items())
        if lr == 0:
            assert sum(read) == pairs and not moved
        else:
            assert sum(read) > 2 * pairs and moved


def _community_rerank_samples(n: int = 40) -> tuple[list, np.ndarray, np.ndarray]:
    """Samples whose relevant candidates are the documents near the asker's community centre, with texts that do not
    say which (every candidate reads alike), and the (e_u, z_u) the personal term's ridge map is fitted on."""
    from prag_models.methods.cfrag.reranker import RerankSample

    rng = np.random.default_rng(1)
    centres, users = _vectors(2, 16, 20), _vectors(2, 8, 21)
    e = np.concatenate([users[c] + 0.05 * rng.normal(size=(10, 8)) for c in (0, 1)]).astype(np.float32)
    z = np.concatenate([centres[c] + 0.1 * rng.normal(size=(10, 16)) for c in (0, 1)]).astype(np.float32)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    out = []
    for i in range(n):
        who = i % 2
        sides = rng.permutation([0, 1, 0, 1, 0, 1])
        docs = np.stack([centres[c] + 0.15 * rng.normal(size=16) for c in sides]).astype(np.float32)
        docs /= np.linalg.norm(docs, axis=1, keepdims=True)
        out.append(RerankSample(f"item {i}", [f"a review of item {i}"] * 6, [0.0 if c == who else -3.0 for c in sides],
                                e[who * 10 + i % 10], list(rng.uniform(0.2, 0.4, size=6)), docs))  # fmt: skip
    return out, e, z


def test_the_personal_term_starts_at_cosine_and_learns_what_the_text_does_not_say(tmp_path) -> None:
    """cfrag.reranker_personal_term: the untrained reranker still ranks like cosine (exactly), needs the documents'
    vectors, and from a teacher that prefers the asker's community (invisible in the texts) its weight grows and the
    community's documents rise; without the term the heads cannot see it. The ridge map survives save and load."""
    from prag_models.methods.cfrag.reranker import rerank_scores, train_reranker
    from prag_models.methods.cfrag.serialization import load_reranker, save_model
    from prag_models.methods.cfrag.training_set import new_reranker

    samples, e, z = _community_rerank_samples()
    hits = {}
    for personal in (True, False):
        settings = CfragSettings(reranker_layers=1, reranker_max_length=16, train_epochs=15, seed=0,
                                 selection_confidence=0, reranker_personal_term=personal)  # fmt: skip
        model = new_reranker(settings, user_dim=8, doc_dim=16)
        model.set_personal_map(e, z)
        s = samples[0]
        users = np.stack([s.user_embedding] * 6)
        start = rerank_scores(model, [s.query] * 6, s.candidates, users, s.base_scores, doc_vectors=s.doc_vectors)
        np.testing.assert_allclose(start, s.base_scores, atol=1e-6)
        fitted = train_reranker(samples, settings, model=model)
        hits[personal] = np.mean([np.mean(np.asarray(x.teacher_scores)[np.argsort(-rerank_scores(
            fitted.model, [x.query] * 6, x.candidates, np.stack([x.user_embedding] * 6), x.base_scores,
            doc_vectors=x.doc_vectors))[:3]] == 0.0) for x in samples])  # fmt: skip
        if personal:
            assert float(fitted.model.personal_weight) > 0.1
            with pytest.raises(ValueError, match="document vector"):
                rerank_scores(fitted.model, [s.query], [s.candidates[0]], users[:1], s.base_scores[:1])
            loaded = load_reranker(save_model(fitted.model, tmp_path / "reranker"))
            again = rerank_scores(loaded, [s.query] * 6, s.candidates, users, s.base_scores, doc_vectors=s.doc_vectors)
            np.testing.assert_allclose(again, rerank_scores(fitted.model, [s.query] * 6, s.candidates, users,
                                                            s.base_scores, doc_vectors=s.doc_vectors), atol=1e-6)
    assert hits[True] > 0.9 and hits[True] > hits[False] + 0.2, hits


def test_untrained_residual_rerankers_are_reported_as_coinciding() -> None:
    """Two rerankers still at their zero correction make cfrag = cfrag_no_reranker_eu, and the metadata says why."""
    import torch

    from prag_models.config.settings import CfragSettings
    from prag_models.methods.cfrag.training_set import new_reranker
    from prag_models.stages.cfrag_retrieval import coincidences

    settings = CfragSettings(reranker_layers=1)
    a, b = new_reranker(settings, 8), new_reranker(settings, 8)
    assert a.kept_initialisation() and b.kept_initialisation()
    assert ("cfrag", "cfrag_no_reranker_eu") in coincidences({"reranker": a, "reranker_no_eu": b})
    assert ("cfrag", "cfrag_no_reranker_tuning") in coincidences({"reranker": a, "reranker_no_eu": b})
    with torch.no_grad():
        a.head[-1].bias.fill_(0.1)  # a trained correction: full CFRAG no longer reranks like the untuned reranker
    assert ("cfrag", "cfrag_no_reranker_tuning") not in coincidences({"reranker": a, "reranker_no_eu": b})
    with torch.no_grad():
        b.head[-1].bias.fill_(0.1)
    assert not b.kept_initialisation()
    assert ("cfrag", "cfrag_no_reranker_eu") not in coincidences({"reranker": a, "reranker_no_eu": b})


def test_a_reranker_that_kept_its_initialisation_is_not_run() -> None:
    """Its correction is exactly zero, so rerank_scores returns the base without running the cross-encoder (the
    wide inference pool would otherwise cost a forward pass per pair for nothing); a trained one runs."""
    import torch

    from prag_models.methods.cfrag.reranker import rerank_scores
    from prag_models.methods.cfrag.training_set import new_reranker

    model = new_reranker(CfragSettings(reranker_layers=1, reranker_max_length=32), user_dim=8)
    calls = []
    model.encoder.register_forward_hook(lambda *_: calls.append(1))
    base = np.array([0.3, 0.1, 0.2], dtype=np.float32)
    args = (["q"] * 3, ["a", "b", "c"], _vectors(3, 8, 0), base)
    np.testing.assert_array_equal(rerank_scores(model, *args), base)
    assert not calls
    with torch.no_grad():
        model.head[-1].bias.fill_(0.5)
    np.testing.assert_allclose(rerank_scores(model, *args), base + 0.5, atol=1e-6)
    assert calls


def test_the_metadata_says_whether_the_retriever_term_can_change_a_top_k_pool() -> None:
    """retriever_pool_changes: with α = 0.1 a personal direction orthogonal to the query reorders no user's top-2 of
    near-ties far apart; a weight of 0.9 does. retriever_reason explains identical cfrag / w/o retriever tuning rows."""
    import torch

    from prag_models.config.settings import load_settings
    from prag_models.methods.cfrag import inference
    from prag_models.methods.cfrag.retriever import PersonalizedRetriever
    from prag_models.methods.profiles import ProfileIndex

    # user b's documents: cos(q, d) 1.0, 0.8, 0.6 along x; the personal direction y favours the last one
    vectors = np.array([[1, 0, 0], [0.8, 0.6, 0], [0.6, 0.8, 0], [0.0, 0.0, 1]], dtype=np.float32)
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    index = ProfileIndex(["d0", "d1", "d2", "d3"], ["b", "b", "b", "a"], ["t"] * 4, vectors, np.ones(4, bool))
    query = inference.CfragQuery("s", "a", "q", np.array([1, 0, 0], np.float32), np.array([1.0, 0.0], np.float32))
    settings = load_settings(environ={"PRAG__CFRAG__INFERENCE_DOCS_PER_USER": "2"})

    def retriever(alpha: float) -> PersonalizedRetriever:
        model = PersonalizedRetriever(2, 3, alpha)
        with torch.no_grad():
            model.proj.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))
            model.proj.bias.zero_()
        return model

    users = {"a": ["a", "b"]}
    assert inference.retriever_pool_changes(index, [query], users, {"retriever": retriever(0.1)}, settings) == 0.0
    assert inference.retriever_pool_changes(index, [query], users, {"retriever": retriever(0.9)}, settings) == 1.0
    assert inference.retriever_pool_changes(index, [query], users, {}, settings) is None
    assert "too small" in inference.retriever_reason(0.0, 1.0, 0.1, 2)
    assert "never put" in inference.retriever_reason(0.5, 1.0, 0.1, 2)
    assert inference.retriever_reason(0.5, 0.9, 0.1, 2) is None


def test_the_pooled_pair_vector_depends_on_the_text_where_minilm_cls_does_not() -> None:
    """The cut MiniLM's [CLS] vector hardly differs between candidates (its heads had nothing to learn from, docs/
    methods.md §2.7); the mean over the pair's tokens does, and a reranker trained on it moves its validation KL."""
    import torch

    from prag_models.methods.cfrag.training_set import new_reranker

    texts = [f"a {c} review of item {j}" for j, c in enumerate(["red", "blue", "red", "blue"])]
    spread = {}
    for pooling in ("cls", "mean"):
        model = new_reranker(CfragSettings(reranker_layers=1, reranker_max_length=32, reranker_pooling=pooling), 8)
        with torch.no_grad():
            vectors = model.pair_vectors(["item 1"] * 4, texts)
        spread[pooling] = float(vectors.std(0).mean() / vectors.abs().mean())
    assert spread["mean"] > 10 * spread["cls"], spread


def test_full_cfrag_ranks_by_the_trained_retriever_plus_the_reranker_correction() -> None:
    """The reranker's residual correction is added to the first stage's score: with a reranker that kept its
    initialisation, full CFRAG's final list follows the trained S (it followed cosine before), and the untuned
    retriever's variant still follows cosine."""
    import torch

    from prag_models.config.settings import load_settings
    from prag_models.methods.cfrag import inference
    from prag_models.methods.cfrag.retriever import PersonalizedRetriever
    from prag_models.methods.cfrag.training_set import new_reranker
    from prag_models.methods.cfrag.variants import VARIANTS
    from prag_models.methods.profiles import ProfileIndex

    vectors = np.array([[1, 0, 0], [0.8, 0.6, 0], [0.6, 0.8, 0], [0.0, 0.0, 1]], dtype=np.float32)
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    index = ProfileIndex(["d0", "d1", "d2", "d3"], ["b", "b", "b", "a"], ["t0", "t1", "t2", "t3"], vectors,
                         np.ones(4, bool))  # fmt: skip
    query = inference.CfragQuery("s", "a", "q", np.array([1, 0, 0], np.float32), np.array([1.0, 0.0], np.float32))
    retriever = PersonalizedRetriever(2, 3, alpha=0.9)  # the personal direction y favours d2
    with torch.no_grad():
        retriever.proj.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))
        retriever.proj.bias.zero_()
    reranker = new_reranker(CfragSettings(reranker_layers=1, reranker_max_length=32), user_dim=2)
    assert reranker.kept_initialisation()
    settings = load_settings(environ={"PRAG__CFRAG__INFERENCE_DOCS_PER_USER": "3", "PRAG__CFRAG__FINAL_K": "1"})
    chosen = [v for v in VARIANTS if v.method in ("cfrag", "cfrag_no_retriever_tuning")]
    found = inference.retrieve(index, [query], {"encoder": {"a": ["b"]}},
                               {"retriever": retriever, "reranker": reranker}, settings, chosen)  # fmt: skip
    assert [x.doc_id for x in found[("s", "cfrag")]] == ["d2"]
    assert [x.doc_id for x in found[("s", "cfrag_no_retriever_tuning")]] == ["d0"]


def test_the_user_pair_term_starts_at_zero_trains_and_survives_saving(tmp_path) -> None:
    """cfrag.reranker_user_rank > 0 adds (U e_u)·(V pair): untrained it adds nothing (the reranker still ranks like
    cosine and is skipped); once V moves it changes scores per user; save and load keep it."""
    import torch

    from prag_models.methods.cfrag.reranker import rerank_scores
    from prag_models.methods.cfrag.serialization import load_reranker, save_model
    from prag_models.methods.cfrag.training_set import new_reranker

    model = new_reranker(CfragSettings(reranker_layers=1, reranker_max_length=32, reranker_user_rank=4), user_dim=8)
    assert model.user_rank == 4 and model.kept_initialisation()
    base = np.array([0.3, 0.1, 0.2], dtype=np.float32)
    texts = ["a", "b", "c"]
    np.testing.assert_array_equal(rerank_scores(model, ["q"] * 3, texts, _vectors(3, 8, 0), base), base)
    with torch.no_grad():
        model.pair_factor.weight.normal_(0, 1.0)
    assert not model.kept_initialisation()
    one, other = (np.tile(_vectors(1, 8, seed), (3, 1)) for seed in (1, 2))
    first = rerank_scores(model, ["q"] * 3, texts, one, base)
    assert not np.allclose(first, rerank_scores(model, ["q"] * 3, texts, other, base))
    loaded = load_reranker(save_model(model, tmp_path / "reranker"))
    assert loaded.user_rank == 4
    np.testing.assert_allclose(rerank_scores(loaded, ["q"] * 3, texts, one, base), first, atol=1e-5)
    no_eu = CfragSettings(reranker_layers=1, reranker_user_rank=4, reranker_use_user_embedding=False)
    assert new_reranker(no_eu, user_dim=8).user_rank == 0  # the ablation without e_u has no user term
