"""The CFRAG training loop's bookkeeping (docs/methods.md §2.6): the validation split, NDCG against the teacher, and
the significance gate that keeps the untrained initialisation unless a trained epoch's gain is shown."""

from __future__ import annotations

import numpy as np
import torch


def test_validation_split_and_ndcg() -> None:
    from prag_models.methods.cfrag.fit import ndcg, split_validation

    train, val = split_validation(16, 0.25, 0)
    assert len(val) == 4 and len(train) == 12 and not set(train) & set(val)
    assert len(split_validation(3, 0.25, 0)[1]) == 0  # too few samples: no validation split
    teacher = np.array([[0.0, -1.0, -2.0]])
    mask = np.ones((1, 3), dtype=bool)
    assert ndcg(np.array([[3.0, 2.0, 1.0]]), teacher, mask, 2) == 1.0
    assert ndcg(np.array([[1.0, 2.0, 3.0]]), teacher, mask, 2) < 0.5


def test_significance_gate_keeps_the_initialisation_unless_the_gain_is_shown() -> None:
    """A trained epoch replaces the initialisation only when its paired validation gain's interval is above 0."""
    from prag_models.methods.cfrag.fit import EpochRecord, FitResult, significance_gate

    init = (0.5, 0.6, 0.7, 0.4, 0.5, 0.6, 0.7, 0.8, 0.5, 0.6)

    def result(trained: tuple[float, ...], by: str = "relevance") -> FitResult:
        history = [EpochRecord(0, 1.0, 1.0, 0.5, float(np.mean(init)), init),
                   EpochRecord(1, 0.9, 0.9, 0.5, float(np.mean(trained)), trained)]  # fmt: skip
        return FitResult(torch.nn.Linear(1, 1), [], history, best_epoch=1, validation_samples=10, selected_by=by)

    deltas = (0.3, -0.25, 0.2, -0.2, 0.3, -0.3, 0.2, -0.1, 0.25, -0.2)
    mixed = tuple(v + d for v, d in zip(init, deltas, strict=True))
    noisy = result(mixed)  # mean gain +0.02, half the samples worse: not shown
    assert not significance_gate(noisy, 0.95)
    assert noisy.gain[3] == 10 and noisy.gain[1] < 0 < noisy.gain[2]
    assert noisy.gate.startswith("initialisation kept") and "not shown at 95%" in noisy.gate
    clear = result(tuple(v + 0.1 for v in init))  # every sample better
    assert significance_gate(clear, 0.95) and clear.gain[1] > 0 and clear.gate.startswith("epoch 1 kept")
    assert clear.summary()["val_gain_n"] == 10 and clear.summary()["gate"] == clear.gate
    assert significance_gate(result(mixed), 0.0)  # confidence 0: no gate


def test_significance_gate_on_kl_selection_tests_the_per_sample_kl_decrease() -> None:
    """Without truth on the validation samples the gate tests the per-sample KL the best epoch lost."""
    from prag_models.methods.cfrag.fit import EpochRecord, FitResult, significance_gate

    init = (1.2, 0.8, 1.5, 0.9, 1.1, 1.3)

    def result(best: tuple[float, ...]) -> FitResult:
        history = [EpochRecord(0, 1.0, float(np.mean(init)), 0.5, val_kl_samples=init),
                   EpochRecord(3, 0.9, float(np.mean(best)), 0.5, val_kl_samples=best)]  # fmt: skip
        return FitResult(torch.nn.Linear(1, 1), [], history, best_epoch=1, validation_samples=6, selected_by="kl")

    lower = result(tuple(v - 0.05 for v in init))  # every sample's KL lower
    assert significance_gate(lower, 0.95) and "KL decrease +0.0500" in lower.gate
    mixed = result(tuple(v + d for v, d in zip(init, (-0.2, 0.15, -0.1, 0.2, -0.15, 0.05), strict=True)))
    assert not significance_gate(mixed, 0.95) and mixed.gate.startswith("initialisation kept")


def test_selection_confidence_outside_zero_to_one_is_a_config_error() -> None:
    """A confidence of 1 or more (or below 0) cannot be an interval's level: load_settings names the setting."""
    import pytest

    from prag_models.config.settings import ConfigError, load_settings

    for bad in ("1.0", "95", "-0.1"):
        with pytest.raises(ConfigError, match="selection_confidence"):
            load_settings(environ={"PRAG__CFRAG__SELECTION_CONFIDENCE": bad})
    assert load_settings(environ={"PRAG__CFRAG__SELECTION_CONFIDENCE": "0"}).cfrag.selection_confidence == 0.0


def test_large_doc_tables_stay_frozen_and_share_the_embeddings_memory() -> None:
    """Above cfrag.finetune_max_docs the encoder trains with a frozen table that is the caller's unit vectors, not a
    copy (at 3.7 M documents a copy is 5.7 GB and Adam's state twice that); a fine-tuned table is its own copy."""
    from prag_models.config.settings import CfragSettings
    from prag_models.methods.cfrag.training import encoder_settings
    from prag_models.methods.cfrag.user_encoder import UserEncoder, train_user_encoder

    rng = np.random.default_rng(0)
    docs = rng.normal(size=(40, 8)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    histories = [list(rng.integers(0, 40, size=6)) for _ in range(8)]
    small, large = CfragSettings(finetune_max_docs=40), CfragSettings(finetune_max_docs=39)
    assert encoder_settings(small, 40).finetune_doc_embeddings is True
    frozen = encoder_settings(large, 40)
    assert frozen.finetune_doc_embeddings is False and large.finetune_doc_embeddings is True  # caller's untouched
    before = docs.copy()
    model, curve = train_user_encoder(histories, docs, frozen.model_copy(update={"epochs": 2, "batch_size": 4}))
    assert curve and np.shares_memory(model.doc_table.weight.detach().numpy(), docs)
    np.testing.assert_array_equal(docs, before)
    tuned = UserEncoder.from_doc_embeddings(docs, finetune_doc_embeddings=True)
    assert not np.shares_memory(tuned.doc_table.weight.detach().numpy(), docs)
    np.testing.assert_allclose(tuned.doc_table.weight.detach().numpy(), docs, atol=1e-6)


def test_the_gate_tests_the_selected_epoch_on_held_out_truth_samples() -> None:
    """The last truth_only samples are never trained on nor used for selection; the gate tests on them: an epoch
    that validation selected but that is worse on them is not kept."""
    from prag_models.config.settings import CfragSettings
    from prag_models.methods.cfrag.fit import fit

    def run(held_out_sign: float) -> tuple:
        model = torch.nn.Linear(1, 1, bias=False)
        torch.nn.init.zeros_(model.weight)
        trained_on: set[int] = set()

        def batch_loss(m, idx):  # noqa: ANN001, ANN202
            trained_on.update(idx)
            return ((m.weight - 1.0) ** 2).sum()

        def evaluate(m, idx):  # noqa: ANN001, ANN202
            w = float(m.weight.detach()[0, 0])
            # per-sample truth NDCG: up with w on the labelled samples, with held_out_sign * w on the held-out ones
            rel = np.array([0.5 + (w if i < 12 else held_out_sign * w) * (1 + 0.01 * i) for i in idx])
            return 1.0 - w, 0.5, rel

        settings = CfragSettings(train_epochs=3, train_lr=0.1, train_batch_size=4, validation_share=0.25)
        result = fit(model, 18, batch_loss, evaluate, settings, truth_only=6)
        return result, trained_on, float(model.weight.detach()[0, 0])

    better, trained_on, w = run(+1.0)
    assert trained_on and max(trained_on) < 12 and better.truth_validation_samples == 6
    assert better.best_epoch > 0 and w > 0 and better.gain[3] == 6 and "held-out truth gain" in better.gate
    worse, _, w = run(-1.0)
    assert worse.best_epoch == 0 and w == 0.0 and worse.gate.startswith("initialisation kept")
    assert worse.summary()["truth_validation_samples"] == 6


def test_teacher_headroom_says_whether_the_teacher_ranks_the_truth_better_than_the_start() -> None:
    """Distillation can only add what the teacher knows beyond the initialisation: the paired truth-NDCG difference
    of the teacher's ranking over the untrained one, on samples whose candidates are not all equally right."""
    from prag_models.methods.cfrag.fit import teacher_headroom

    gains = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [0, 1, 0], [1, 0, 0]], dtype=np.float32)
    mask = np.ones(gains.shape, dtype=bool)
    knows = gains + 0.1  # the teacher puts the relevant candidate first
    start = np.tile([0.0, 0.5, 1.0], (6, 1))  # the start puts the third candidate first
    value, low, high, n, teacher_mean, start_mean = teacher_headroom(knows, start, gains, mask, 1)
    assert n == 5 and teacher_mean == 1.0 and abs(start_mean - 0.2) < 1e-9  # the all-relevant sample is left out
    assert value == teacher_mean - start_mean and low > 0
    assert teacher_headroom(start, start, gains, mask, 1)[:3] == (0.0, 0.0, 0.0)
    assert teacher_headroom(knows, start, None, mask, 1) is None


def test_training_records_the_teachers_headroom_over_the_initialisation() -> None:
    """train_retriever fills FitResult.headroom from the labelled samples (not the truth-only ones) and the summary
    carries it to MLflow."""
    from prag_models.config.settings import CfragSettings
    from prag_models.methods.cfrag.retriever import train_retriever

    rng = np.random.default_rng(0)
    n, c, d = 10, 4, 8
    queries = rng.normal(size=(n, d)).astype(np.float32)
    docs = rng.normal(size=(n, c, d)).astype(np.float32)
    relevance = np.zeros((n, c), dtype=np.float32)
    relevance[np.arange(n), rng.integers(0, c, size=n)] = 1.0
    teacher = relevance * 5.0  # a teacher that knows the truth
    settings = CfragSettings(train_epochs=1, validation_share=0.25, final_k=1)
    fitted = train_retriever(queries, docs, np.ones((n, c), dtype=bool), rng.normal(size=(n, 4)).astype(np.float32),
                             teacher, settings, relevance=relevance, truth_only=2)  # fmt: skip
    value, low, _, count, teacher_mean, _ = fitted.headroom
    assert count == 8 and teacher_mean == 1.0 and value > 0
    assert fitted.summary()["teacher_gain_n"] == 8 and fitted.summary()["teacher_truth_ndcg"] == 1.0


def test_torch_threads_sets_and_restores_the_count() -> None:
    """cfrag.train_threads: 0 leaves torch's count (every core, or OMP_NUM_THREADS), n sets n; both restore it."""
    from prag_models.methods.cfrag.probes import single_thread, torch_threads

    before = torch.get_num_threads()
    with torch_threads(0):
        assert torch.get_num_threads() == before
    with torch_threads(before + 1):
        assert torch.get_num_threads() == before + 1
    with single_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_a_trained_model_says_what_its_registered_version_records() -> None:
    """MLflow tags carry the fit's summary (booleans lower-case) and the per-epoch metrics its history; a model
    trained without a validation record (the user encoder) gets task and kind only."""
    from prag_models.methods.cfrag.fit import EpochRecord, FitResult
    from prag_models.methods.cfrag.training import Trained

    history = [EpochRecord(0, 1.0, 0.8, 0.5, 0.6), EpochRecord(1, 0.7, 0.6, 0.55, 0.65)]
    fitted = FitResult(torch.nn.Linear(1, 1), [0.9, 0.7], history, best_epoch=1, validation_samples=4)
    trained = Trained("reranker", fitted.model, fitted.curve, {}, "v1", 1.0, fitted)
    tags = trained.registry_tags("LaMP-2")
    assert tags["task"] == "LaMP-2" and tags["kind"] == "reranker"
    assert tags["training.best_epoch"] == "1" and tags["training.validation_samples"] == "4"
    assert tags["training.improved"] == "true" and tags["training.val_kl_best"] == "0.6"
    assert trained.epoch_metrics() == {"train_loss": [1.0, 0.7], "val_kl": [0.8, 0.6], "val_ndcg": [0.5, 0.55],
                                       "val_relevance_ndcg": [0.6, 0.65]}
    encoder = Trained("user_encoder", None, [1.0], {}, "v1", 1.0)
    assert encoder.registry_tags("LaMP-2") == {"task": "LaMP-2", "kind": "user_encoder"}
    assert encoder.epoch_metrics() is None and encoder.summary() == {}
