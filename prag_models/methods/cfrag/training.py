"""One function per CFRAG training stage (docs/methods.md §2.2, §2.6, §2.7): read the task's inputs, train, and
return what the registry records (model, loss curve, parameters, data version, time, the training rows). A
``track(kind)`` context (:data:`Tracker`) is entered around each fit, so the MLflow run spans the training."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from prag_models.config.settings import CfragSettings, Settings
from prag_models.data.truth import load_truth
from prag_models.methods.cfrag.feedback import (
    FeedbackInputs,
    load_training_set,
    projection_targets,
    truth_validation_set,
)
from prag_models.methods.cfrag.probes import torch_threads
from prag_models.methods.cfrag.tables import history_version, model_row, task_histories
from prag_models.methods.cfrag.training_set import TrainingSet, concat_sets, new_reranker, rerank_samples
from prag_models.storage.hashing import data_version

_ENCODER_PARAMS = ("max_history", "heads", "dropout", "finetune_doc_embeddings", "crop_ratio", "mask_ratio",
                   "reorder_ratio", "tau", "lr", "weight_decay", "batch_size", "epochs", "seed")  # fmt: skip
_TRAIN_PARAMS = ("alpha", "retriever_projection", "train_lr", "train_epochs", "train_batch_size", "validation_share",
                 "early_stopping_patience", "feedback_signal", "selection_metric", "truth_validation", "seed",
                 "top_m_users", "user_vectors", "docs_per_user", "feedback_max_users", "max_feedback_samples",
                 "learn_alpha", "retriever_metric_lr")  # fmt: skip

#: kind -> a context around that kind's fit yielding its MLflow run id (``mlops.runs.RunTracker`` in the graph).
Tracker = Callable[[str], AbstractContextManager[str]]


def no_tracking(kind: str) -> AbstractContextManager[str]:
    """The tracker of a fit outside any MLflow run (run id "")."""
    return nullcontext("")


@dataclass
class Trained:
    """A trained model of one kind for one task, with what its registration records."""

    kind: str
    model: Any
    curve: list[float]
    params: dict[str, Any]
    data_version: str
    seconds: float
    fitted: Any = None  # a FitResult (per-epoch validation record) for the retriever and rerankers
    run_id: str = ""  # the MLflow run opened around the fit ("" = none: the registration opens one)
    rows: Any = None  # the training rows (a DataFrame) for the run's dataset input
    skipped: str = ""  # why the initialisation is registered untrained (the feedback probe showed no headroom)

    def summary(self) -> dict[str, Any]:
        """The fit's summary (selection, gate, headroom); {} for a model trained without a validation record."""
        return self.fitted.summary() if self.fitted is not None else {}

    def registry_tags(self, task: str) -> dict[str, str]:
        """MLflow tags of the registered version: task, kind and ``training.<key>`` for each summary entry."""
        tags = {"task": task, "kind": self.kind} | ({"training.skipped": self.skipped} if self.skipped else {})
        return tags | {f"training.{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in
                       self.summary().items()}

    def epoch_metrics(self) -> dict[str, list] | None:
        """Per-epoch training loss, validation KL and NDCGs for MLflow; None without a validation record."""
        if self.fitted is None:
            return None
        history = self.fitted.history
        return {"train_loss": [h.train_loss for h in history], "val_kl": [h.val_kl for h in history],
                "val_ndcg": [h.val_ndcg for h in history], "val_relevance_ndcg": [h.val_relevance for h in history]}


def encoder_settings(c: CfragSettings, documents: int) -> CfragSettings:
    """The settings the encoder trains with: the doc table frozen above cfrag.finetune_max_docs documents."""
    finetune = c.finetune_doc_embeddings and documents <= c.finetune_max_docs
    return c.model_copy(update={"finetune_doc_embeddings": finetune})


def train_task_user_encoder(
    con, task: str, settings: Settings, progress: Callable[[int, int], None] | None = None,
    track: Tracker = no_tracking,
) -> Trained:  # fmt: skip
    """The contrastive user encoder of one task, trained on the histories of all its users (§2.1–2.2)."""
    import torch

    from prag_models.methods.cfrag.user_encoder import train_user_encoder

    _, histories, matrix, keys = task_histories(con, task, settings.privacy.default_share)
    c = encoder_settings(settings.cfrag, keys.num_rows)
    started = time.perf_counter()
    with track("user_encoder") as run_id, torch_threads(c.train_threads):
        threads = torch.get_num_threads()
        model, curve = train_user_encoder([histories[u] for u in sorted(histories)], matrix, c, progress)
    del matrix  # a frozen table shares it; otherwise the model holds its own copy
    model.doc_rows = keys.select(["user_id", "doc_id"])  # the document-row map saved with it (serving checks it)
    params = {k: getattr(c, k) for k in _ENCODER_PARAMS}
    params |= {"task": task, "users": len(histories), "documents": keys.num_rows,
               "finetune_max_docs": c.finetune_max_docs, "torch_threads": threads}  # fmt: skip
    # the histories in their order, not the stored positions: a position counts the owner's hidden documents too
    version = history_version(keys.select([c for c in keys.column_names if c != "position"]))
    rows = pd.DataFrame({"user_id": sorted(histories), "documents": [len(histories[u]) for u in sorted(histories)]})
    return Trained("user_encoder", model, curve, params, version, time.perf_counter() - started, None, run_id, rows)


def candidate_truth(con, task: str, ts: TrainingSet, doc_ids: list[str]) -> np.ndarray | None:
    """(n, C) 0/1 truth of each training candidate (NaN where unknown; None when the task has no truth at all), for
    model selection on the validation samples (cfrag.selection_metric = relevance)."""
    truth = load_truth(con, task, "train")
    gains = np.full(ts.mask.shape, np.nan, dtype=np.float32)
    for i, (sample_id, rows) in enumerate(zip(ts.sample_ids, ts.rows, strict=True)):
        for j, row in enumerate(rows):
            gain = truth.gain(sample_id, doc_ids[row])
            if gain is not None:
                gains[i, j] = gain
    return None if np.isnan(gains).all() else gains


def with_truth_validation(
    con, task: str, settings: Settings, inputs: FeedbackInputs, labelled: TrainingSet
) -> tuple[TrainingSet, np.ndarray | None, int, dict[str, str]]:
    """The labelled samples followed by the held-out truth samples the gate tests on (none when the task has no
    truth), the truth of every candidate, how many samples are truth-only, and their query texts."""
    extra, queries = truth_validation_set(con, task, settings, inputs)
    if not extra.sample_ids:
        return labelled, candidate_truth(con, task, labelled, inputs.index.doc_ids), 0, {}
    full = concat_sets(labelled, extra)
    relevance = candidate_truth(con, task, full, inputs.index.doc_ids)
    if relevance is None:  # no truth anywhere in the task: nothing to test on
        return labelled, None, 0, {}
    return full, relevance, len(extra.sample_ids), queries


def sample_rows(ts: TrainingSet, truth_only: int) -> pd.DataFrame:
    """The training set as rows for MLflow: sample, user, candidates, whether it is a truth-only validation sample."""
    n = len(ts.sample_ids)
    return pd.DataFrame({"sample_id": ts.sample_ids, "user_id": ts.user_ids, "candidates": [len(r) for r in ts.rows],
                         "truth_only": [i >= n - truth_only for i in range(n)]})  # fmt: skip


def train_task_retriever(
    con, task: str, settings: Settings, generator_id: str, track: Tracker = no_tracking
) -> Trained:  # fmt: skip
    """The personalized retriever of one task distilled from its feedback labels (§2.4, §2.6)."""
    from prag_models.methods.cfrag.retriever import train_retriever

    c = settings.cfrag
    skipped = untrained_models(con, task, settings, generator_id, ("retriever",))
    if skipped:
        return skipped[0]
    inputs, labelled, used, encoder = load_training_set(con, task, settings, generator_id)
    ts, relevance, truth_only, _ = with_truth_validation(con, task, settings, inputs, labelled)
    started = time.perf_counter()
    with track("retriever") as run_id, torch_threads(c.train_threads):
        fitted = train_retriever(
            ts.queries, ts.docs, ts.mask, ts.user_emb, ts.teacher, c,
            init_targets=projection_targets(con, task), relevance=relevance, truth_only=truth_only,
        )  # fmt: skip
    params = {k: getattr(c, k) for k in _TRAIN_PARAMS} | {
        "temperature": c.retriever_temperature,
        "trained_alpha": round(fitted.model.effective_alpha(), 4),
        "task": task,
        "samples": len(labelled.sample_ids),
        "truth_validation_samples": truth_only,
        "generator": generator_id,
        "user_encoder": encoder,
    }
    version = data_version(used, encoder, generator_id)
    seconds = time.perf_counter() - started
    return Trained("retriever", fitted.model, fitted.curve, params, version, seconds, fitted, run_id,
                   sample_rows(ts, truth_only))  # fmt: skip


def train_task_rerankers(
    con, task: str, settings: Settings, generator_id: str, track: Tracker = no_tracking,
    kinds: tuple[str, ...] = ("reranker", "reranker_no_eu"),
) -> list[Trained]:  # fmt: skip
    """The personalized reranker of one task and its ablation without e_u (§2.7, §2.8), of the given kinds."""
    from prag_models.methods.cfrag.reranker import train_reranker

    skipped = untrained_models(con, task, settings, generator_id, ("reranker", "reranker_no_eu"))
    if skipped:
        return skipped
    inputs, labelled, used, encoder = load_training_set(con, task, settings, generator_id)
    ts, relevance, truth_only, extra_queries = with_truth_validation(con, task, settings, inputs, labelled)
    queries = dict(zip(inputs.samples["sample_id"], inputs.samples["query"], strict=True)) | extra_queries
    samples = rerank_samples(ts, queries, inputs.index.texts)
    targets = projection_targets(con, task)  # P of the personal term (cfrag.reranker_personal_term)
    truth_rows = None if relevance is None else [relevance[i, : len(r)] for i, r in enumerate(ts.rows)]
    out = []
    for kind, use_eu in (("reranker", True), ("reranker_no_eu", False)):
        if kind not in kinds:
            continue
        c = settings.cfrag.model_copy(update={"reranker_use_user_embedding": use_eu})
        started = time.perf_counter()
        model = new_reranker(c, int(ts.user_emb.shape[1]), int(ts.docs.shape[-1]))
        model.set_personal_map(*targets)
        with track(kind) as run_id:
            fitted = train_reranker(samples, c, model=model, relevance=truth_rows, truth_only=truth_only)
        params = {k: getattr(c, k) for k in _TRAIN_PARAMS if k not in ("alpha", "retriever_projection", "learn_alpha",
                                                                 "retriever_metric_lr")}
        params |= {
            "temperature": c.reranker_temperature,
            "reranker_model": c.reranker_model,
            "max_length": c.reranker_max_length,
            "layers": c.reranker_layers,
            "encoder_lr": c.reranker_encoder_lr,
            "personal_term": c.reranker_personal_term,
            "use_user_embedding": use_eu,
            "task": task,
            "samples": len(labelled.sample_ids),
            "truth_validation_samples": truth_only,
            "generator": generator_id,
            "user_encoder": encoder,
        }
        version = data_version(used, encoder, generator_id, c.reranker_model)
        seconds = time.perf_counter() - started
        out.append(Trained(kind, fitted.model, fitted.curve, params, version, seconds, fitted, run_id,
                           sample_rows(ts, truth_only)))  # fmt: skip
    return out


def untrained_models(con, task: str, settings: Settings, generator_id: str, kinds: tuple[str, ...]) -> list[Trained]:
    """The initialisations of the given kinds, when the feedback probe stopped labelling for this generator (no teacher
    headroom over cosine: training would distil a teacher no better than the start), tagged why; [] otherwise."""
    import torch

    from prag_models.methods.cfrag.feedback_labels import feedback_prompt_version
    from prag_models.methods.cfrag.feedback_probe import probe_stop_reason
    from prag_models.methods.cfrag.retriever import PersonalizedRetriever, init_projection

    reason = probe_stop_reason(con, task, generator_id, feedback_prompt_version(task, settings))
    if not reason:
        return []
    c, started = settings.cfrag, time.perf_counter()
    e, z = projection_targets(con, task)
    encoder = model_row(con, task, "user_encoder")
    encoder_version = f"{encoder['registered_name']}/{encoder['version']}"
    out = []
    for kind in kinds:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(c.seed)
            if kind == "retriever":
                model = PersonalizedRetriever(e.shape[1], z.shape[1], c.alpha, c.retriever_projection)
                init_projection(model, e, z)  # as train_retriever starts it
            else:
                kc = c.model_copy(update={"reranker_use_user_embedding": kind == "reranker"})
                model = new_reranker(kc, int(e.shape[1]), int(z.shape[1]))
                model.set_personal_map(e, z)  # as train_task_rerankers starts it
        params = {k: getattr(c, k) for k in _TRAIN_PARAMS} | {
            "task": task, "samples": 0, "generator": generator_id, "user_encoder": encoder_version,
            "untrained": reason}  # fmt: skip
        version = data_version(reason, encoder_version, generator_id, kind)
        out.append(Trained(kind, model, [], params, version, time.perf_counter() - started, skipped=reason))
    return out
