"""Unit tests of the CFRAG models (docs/methods.md §2) with hand-computed expected values."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from prag_models.config.settings import CfragSettings  # noqa: E402
from prag_models.methods.cfrag import augment as aug  # noqa: E402
from prag_models.methods.cfrag.retriever import (  # noqa: E402
    PersonalizedRetriever,
    kl_loss,
    retriever_scores,
    train_retriever,
)
from prag_models.methods.cfrag.serialization import load_model, save_model  # noqa: E402
from prag_models.methods.cfrag.user_encoder import (  # noqa: E402
    UserEncoder,
    encode_users,
    info_nce,
    top_m_similar_users,
    train_user_encoder,
)

SEQ = list(range(10, 20))  # N = 10 → crop 7, mask 3, reorder span 3
MASK_ID = 99


# ---------------------------------------------------------------- augmentations (§2.2)


def test_crop_is_contiguous_span_of_floor_07n() -> None:
    for seed in range(20):
        out = aug.crop(SEQ, 0.7, np.random.default_rng(seed))
        assert len(out) == 7
        start = out[0] - 10
        assert out == SEQ[start : start + 7]
    assert len(aug.crop(list(range(20)), 0.7, np.random.default_rng(0))) == 14
    assert aug.crop([5], 0.7, np.random.default_rng(0)) == [5]  # never empty


def test_mask_replaces_exactly_floor_03n_positions() -> None:
    for seed in range(20):
        out = aug.mask(SEQ, 0.3, MASK_ID, np.random.default_rng(seed))
        assert len(out) == 10
        changed = [i for i in range(10) if out[i] != SEQ[i]]
        assert len(changed) == 3
        assert all(out[i] == MASK_ID for i in changed)
    assert aug.mask([1, 2, 3], 0.3, MASK_ID, np.random.default_rng(0)) == [1, 2, 3]  # ⌊0.9⌋ = 0


def test_reorder_shuffles_only_a_contiguous_span() -> None:
    shuffled = 0
    for seed in range(30):
        out = aug.reorder(SEQ, 0.3, np.random.default_rng(seed))
        assert sorted(out) == SEQ
        changed = [i for i in range(10) if out[i] != SEQ[i]]
        if changed:
            shuffled += 1
            assert max(changed) - min(changed) <= 2  # inside one span of 3
    assert shuffled > 15  # 5 of the 6 permutations of 3 change something


def test_augmentations_are_deterministic_with_a_seed_and_uniform() -> None:
    a = [aug.two_views(SEQ, np.random.default_rng(3), MASK_ID) for _ in range(2)]
    assert a[0] == a[1]
    rng = np.random.default_rng(0)
    kinds: Counter[str] = Counter()
    for _ in range(600):
        out = aug.augment(SEQ, rng, MASK_ID)
        kinds["crop" if len(out) == 7 else "mask" if MASK_ID in out else "reorder"] += 1
    assert set(kinds) == {"crop", "mask", "reorder"}
    assert all(150 < v < 250 for v in kinds.values())


# ---------------------------------------------------------------- losses


def test_info_nce_two_by_two_hand_value() -> None:
    # z1 = (1,0),(0,1); z2 = (1,1)/√2,(0,1); τ = 1; c = 1/√2.
    # anchor z1[0]: pos c, negs 0,0 → log(1+2e^-c) = 0.686192
    # anchor z1[1] and z2[1]: pos 1, negs 0, c → log(1+e^-1+e^(c-1)) = 0.748573 (twice)
    # anchor z2[0]: pos c, negs c, c → log 3 = 1.098612;  mean = 0.820488
    z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    z2 = torch.tensor([[1.0, 1.0], [0.0, 2.0]])
    assert float(info_nce(z1, z2, tau=1.0)) == pytest.approx(0.8204875, abs=1e-5)
    # τ = 0.5 doubles every logit: anchor z1[0] → log(1+2e^-2c) etc.
    c = 1 / math.sqrt(2)
    expected = (
        math.log(1 + 2 * math.exp(-2 * c)) + 2 * math.log(1 + math.exp(-2) + math.exp(2 * c - 2)) + math.log(3)
    ) / 4
    assert float(info_nce(z1, z2, tau=0.5)) == pytest.approx(expected, abs=1e-5)


def test_kl_loss_hand_value_and_masked_candidates() -> None:
    # row 1: valid [0.5, 0] /T=0.5 → [1, 0]; p = [e/(e+1), 1/(e+1)], q = [.5, .5] → KL = 0.120115
    # row 2: student uniform 1/3; teacher [ln2/2, 0, 0]/0.5 → q = [.5, .25, .25] → KL = 0.5·ln 1.125 = 0.058892
    # batchmean = (0.120115 + 0.058892) / 2 = 0.089503
    student = torch.tensor([[0.5, 0.0, 7.0], [0.0, 0.0, 0.0]])
    teacher = torch.tensor([[0.0, 0.0, -3.0], [math.log(2) / 2, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    loss = kl_loss(student, teacher, mask, temperature=0.5)
    assert float(loss) == pytest.approx(0.0895030, abs=1e-6)
    moved_s, moved_t = student.clone(), teacher.clone()
    moved_s[0, 2], moved_t[0, 2] = -100.0, 50.0
    assert float(kl_loss(moved_s, moved_t, mask, 0.5)) == float(loss)
    # gradients: a padded candidate receives exactly zero gradient
    s = student.clone().requires_grad_(True)
    kl_loss(s, teacher, mask, 0.5).backward()
    assert float(s.grad[0, 2]) == 0.0 and torch.isfinite(s.grad).all()
    # a row without any valid candidate contributes zero and no NaN
    empty = torch.tensor([[False, False, False], [True, True, True]])
    assert float(kl_loss(student, teacher, empty, 0.5)) == pytest.approx(0.0588915 / 2, abs=1e-6)


# ---------------------------------------------------------------- retriever (§2.4)


def test_retriever_score_with_alpha_hand_value() -> None:
    # q = (3,4); d1 = (1,0), d2 = (0,2); W = I, b = 0, e_u = (0,1); α = 0.1
    # S1 = 0.9·0.6 + 0.1·0 = 0.54; S2 = 0.9·0.8 + 0.1·1 = 0.82
    model = PersonalizedRetriever(user_dim=2, doc_dim=2, alpha=0.1)
    with torch.no_grad():
        model.proj.weight.copy_(torch.eye(2))
        model.proj.bias.zero_()
    scores = retriever_scores(
        model, np.array([[3.0, 4.0]]), np.array([[[1.0, 0.0], [0.0, 2.0]]]), np.array([[0.0, 1.0]])
    )
    np.testing.assert_allclose(scores, [[0.54, 0.82]], atol=1e-6)
    model.alpha = 0.0
    scores = retriever_scores(
        model, np.array([[3.0, 4.0]]), np.array([[[1.0, 0.0], [0.0, 2.0]]]), np.array([[0.0, 1.0]])
    )
    np.testing.assert_allclose(scores, [[0.6, 0.8]], atol=1e-6)


def test_retriever_training_lowers_kl_and_round_trips(tmp_path) -> None:
    rng = np.random.default_rng(0)
    n, c, d = 32, 6, 8
    users = rng.normal(size=(n, d)).astype(np.float32)
    docs = rng.normal(size=(n, c, d)).astype(np.float32)
    q = rng.normal(size=(n, d)).astype(np.float32)
    teacher = np.einsum("nd,ncd->nc", users, docs) * 3.0  # the LLM "likes" docs close to the user
    mask = np.ones((n, c), dtype=bool)
    mask[::2, -2:] = False
    settings = CfragSettings(
        alpha=0.5, train_lr=0.05, train_epochs=15, train_batch_size=8, validation_share=0.0, early_stopping_patience=0,
        retriever_projection="linear",
    )
    fitted = train_retriever(q, docs, mask, users, teacher, settings)
    model, curve = fitted.model, fitted.curve
    assert len(curve) == 15 * 4
    assert np.mean(curve[-4:]) < np.mean(curve[:4])
    assert curve == train_retriever(q, docs, mask, users, teacher, settings).curve
    loaded = load_model(save_model(model, tmp_path / "retriever"))
    np.testing.assert_array_equal(retriever_scores(model, q, docs, users), retriever_scores(loaded, q, docs, users))


def test_the_diagonal_retriever_keeps_w_at_its_ridge_start_and_learns_a_metric(tmp_path) -> None:
    """projection = "diagonal" (the default): W stays where init_projection put it, the per-dimension metric (all
    ones at first, so the untrained model scores like the linear one) moves, the KL falls, the model round-trips."""
    from prag_models.methods.cfrag.retriever import init_projection

    rng = np.random.default_rng(0)
    n, c, d = 32, 6, 8
    users = rng.normal(size=(n, d)).astype(np.float32)
    docs = rng.normal(size=(n, c, d)).astype(np.float32)
    q = rng.normal(size=(n, d)).astype(np.float32)
    teacher = 3.0 * docs[:, :, 0]  # the teacher likes documents high on one dimension
    mask = np.ones((n, c), dtype=bool)
    settings = CfragSettings(alpha=0.5, train_epochs=10, train_batch_size=8, validation_share=0.0,
                             early_stopping_patience=0)  # fmt: skip
    assert settings.retriever_projection == "diagonal"
    start = PersonalizedRetriever(d, d, 0.5, "diagonal")
    linear = PersonalizedRetriever(d, d, 0.5, "linear")
    init_projection(start, users, users)
    init_projection(linear, users, users)
    np.testing.assert_allclose(retriever_scores(start, q, docs, users), retriever_scores(linear, q, docs, users),
                               atol=1e-6)  # fmt: skip
    w0 = start.proj.weight.detach().clone()
    fitted = train_retriever(q, docs, mask, users, teacher, settings, model=start)
    model = fitted.model
    assert torch.equal(model.proj.weight, w0)
    assert not torch.allclose(model.metric, torch.ones(d))
    assert np.mean(fitted.curve[-4:]) < np.mean(fitted.curve[:4])
    loaded = load_model(save_model(model, tmp_path / "retriever"))
    np.testing.assert_array_equal(retriever_scores(model, q, docs, users), retriever_scores(loaded, q, docs, users))


# ---------------------------------------------------------------- user encoder (§2.1–2.3)


def _synthetic_users(seed: int = 0) -> tuple[np.ndarray, list[list[int]]]:
    """3 communities of 8 users, each drawing 12 docs from its own 20-doc pool; 16-d doc embeddings."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(3, 16))
    docs = np.concatenate([centers[g] + 0.5 * rng.normal(size=(20, 16)) for g in range(3)]).astype(np.float32)
    histories = [list(rng.choice(20, size=12, replace=False) + 20 * (u % 3)) for u in range(24)]
    return docs, histories


def test_user_encoder_padding_and_shapes() -> None:
    docs, histories = _synthetic_users()
    model = UserEncoder.from_doc_embeddings(docs, max_len=10, heads=2)
    assert model.pad_id == 60 and model.mask_id == 61
    np.testing.assert_allclose(np.linalg.norm(model.doc_table.weight.detach().numpy(), axis=1), 1.0, atol=1e-5)
    ids = model.pad_batch([[1, 2, 3], list(range(15)), []])
    assert ids.shape == (3, 10)
    assert ids[0].tolist() == [1, 2, 3] + [60] * 7
    assert ids[1].tolist() == list(range(5, 15))  # the last max_len docs
    assert ids[2, 0] == 61
    emb = encode_users(model, [[1, 2, 3], [1, 2, 3, 60, 60], list(range(15)), []])
    assert emb.shape == (4, 16) and np.isfinite(emb).all()
    # explicit padding changes nothing: pads are ignored by attention and pooling
    np.testing.assert_allclose(emb[0], emb[1], atol=1e-5)
    frozen = UserEncoder.from_doc_embeddings(docs, finetune_doc_embeddings=False)
    assert not frozen.doc_table.weight.requires_grad and frozen.mask_embedding.requires_grad


def test_contrastive_training_lowers_loss_and_is_deterministic(tmp_path) -> None:
    docs, histories = _synthetic_users()
    settings = CfragSettings(epochs=12, batch_size=8, max_history=20)
    steps: list[tuple[int, int]] = []
    model, curve = train_user_encoder(histories, docs, settings, progress=lambda i, n: steps.append((i, n)))
    assert len(curve) == 12 * 3 and steps[-1] == (36, 36)
    assert np.mean(curve[-6:]) < np.mean(curve[:6])
    _, curve2 = train_user_encoder(histories, docs, settings)
    assert curve == curve2
    emb = encode_users(model, histories)
    loaded = load_model(save_model(model, tmp_path / "user_encoder"))
    np.testing.assert_array_equal(encode_users(loaded, histories), emb)
    # users of the same community end up as each other's nearest neighbours more often than chance (1/3)
    idx, _ = top_m_similar_users(emb, m=4, include_self=False)
    same = np.mean([(idx[u] % 3 == u % 3).mean() for u in range(24)])
    assert same > 0.6


def test_top_m_similar_users_hand_example() -> None:
    # cosines to user 0 = (1,0): user1 (1,1)/√2 → 0.7071, user2 (0,1) → 0, user3 (2,0.1) → 0.99875
    emb = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [2.0, 0.1]], dtype=np.float32)
    idx, scores = top_m_similar_users(emb, m=3, include_self=True)
    assert idx.shape == (4, 3)
    assert idx[0].tolist() == [0, 3, 1]
    np.testing.assert_allclose(scores[0], [1.0, 2 / math.sqrt(4.01), 1 / math.sqrt(2)], atol=1e-5)
    idx, scores = top_m_similar_users(emb, m=3, include_self=False)
    assert idx[0].tolist() == [3, 1, 2]
    assert idx[2].tolist() == [1, 3, 0]  # (0,1): 0.7071, 0.0499, 0
    idx, _ = top_m_similar_users(emb, m=10, include_self=False)
    assert idx.shape == (4, 3)


# ---------------------------------------------------------------- reranker (§2.7), real MiniLM, loaded once


@pytest.fixture(scope="module")
def reranker():
    """The paper's (non-residual) reranker over the packaged MiniLM: a missing model is an error, not a skip."""
    from prag_models.methods.cfrag.reranker import build_reranker

    return build_reranker(CfragSettings(reranker_max_length=64, seed=0, reranker_residual=False), user_dim=8)


def test_reranker_shape_and_user_embedding_effect(reranker) -> None:
    queries = ["a sci-fi movie about robots", "a sci-fi movie about robots", "a quiet romance"]
    docs = ["'description': robots rebel 'tag': sci-fi", "'description': two lovers 'tag': romance", "a review"]
    u1 = np.ones((3, 8), dtype=np.float32)
    u2 = -np.ones((3, 8), dtype=np.float32)
    reranker.eval()
    with torch.no_grad():
        s1 = reranker.score(queries, docs, u1)
        s2 = reranker.score(queries, docs, u2)
        assert s1.shape == (3,)
        assert not torch.allclose(s1, s2)
        reranker.use_user_embedding = False
        try:
            assert torch.equal(reranker.score(queries, docs, u1), reranker.score(queries, docs, u2))
        finally:
            reranker.use_user_embedding = True


def test_reranker_round_trip_and_train_step(reranker, tmp_path) -> None:
    from prag_models.methods.cfrag.reranker import RerankSample, rerank_scores, train_reranker

    queries, docs = ["q one", "q two", "q three"], ["doc a", "doc b about things", "doc c"]
    users = np.arange(24, dtype=np.float32).reshape(3, 8) / 24
    before = rerank_scores(reranker, queries, docs, users)
    loaded = load_model(save_model(reranker, tmp_path / "reranker"))
    assert (tmp_path / "reranker" / "model.safetensors").exists()
    np.testing.assert_array_equal(rerank_scores(loaded, queries, docs, users), before)
    samples = [
        RerankSample("q one", ["doc a", "doc b", "doc c"], [1.0, 0.0, 0.0], users[0]),
        RerankSample("q two", ["doc b", "doc c"], [0.0, 1.0], users[1]),  # padded to 3 candidates
    ]
    # no significance gate (selection_confidence 0): this test is about one training step moving the weights
    settings = CfragSettings(train_batch_size=2, seed=0, train_epochs=1, validation_share=0.0, selection_confidence=0)
    fitted = train_reranker(samples, settings, model=loaded)
    trained, curve = fitted.model, fitted.curve
    assert len(curve) == 1 and math.isfinite(curve[0])
    assert not trained.training
    assert not np.array_equal(rerank_scores(trained, queries, docs, users), before)


def test_build_reranker_is_seeded(reranker) -> None:
    from prag_models.methods.cfrag.reranker import build_reranker
    from prag_models.methods.cfrag.serialization import state_dicts_equal

    again = build_reranker(CfragSettings(reranker_max_length=64, seed=0, reranker_residual=False), user_dim=8)
    fresh = build_reranker(CfragSettings(reranker_max_length=64, seed=0, reranker_residual=False), user_dim=8)
    assert state_dicts_equal(again, fresh)
