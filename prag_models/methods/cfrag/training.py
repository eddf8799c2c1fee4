"""One function per CFRAG training stage (docs/methods.md §2.2, §2.6, §2.7): read the task's inputs, train, and
return what the registry records (model, loss curve, parameters, data version, time)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prag_models.config import Settings
from prag_models.methods.cfrag.feedback import load_training_set, projection_targets
from prag_models.methods.cfrag.probes import single_thread
from prag_models.methods.cfrag.tables import task_histories
from prag_models.methods.cfrag.training_set import new_reranker, rerank_samples
from prag_models.registry import data_version

_ENCODER_PARAMS = ("max_history", "heads", "dropout", "finetune_doc_embeddings", "crop_ratio", "mask_ratio",
                   "reorder_ratio", "tau", "lr", "weight_decay", "batch_size", "epochs", "seed")  # fmt: skip
_TRAIN_PARAMS = ("alpha", "retriever_projection", "train_lr", "train_epochs", "train_batch_size", "validation_share",
                 "early_stopping_patience", "feedback_signal", "seed", "top_m_users", "docs_per_user",
                 "max_feedback_samples")  # fmt: skip


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


def train_task_user_encoder(
    con, task: str, settings: Settings, progress: Callable[[int, int], None] | None = None
) -> Trained:
    """The contrastive user encoder of one task, trained on the histories of all its users (§2.1–2.2)."""
    from prag_models.methods.cfrag.user_encoder import train_user_encoder

    c = settings.cfrag
    _, histories, matrix, docs = task_histories(con, task)
    started = time.perf_counter()
    with single_thread():
        model, curve = train_user_encoder([histories[u] for u in sorted(histories)], matrix, c, progress)
    params = {k: getattr(c, k) for k in _ENCODER_PARAMS}
    params |= {"task": task, "users": len(histories), "documents": len(docs)}
    version = data_version(docs[["user_id", "doc_id", "position", "model_id", "content_hash"]])
    return Trained("user_encoder", model, curve, params, version, time.perf_counter() - started)


def train_task_retriever(con, task: str, settings: Settings, generator_id: str) -> Trained:
    """The personalized retriever of one task distilled from its feedback labels (§2.4, §2.6)."""
    from prag_models.methods.cfrag.retriever import train_retriever

    c = settings.cfrag
    _, ts, used, encoder = load_training_set(con, task, settings, generator_id)
    started = time.perf_counter()
    with single_thread():
        fitted = train_retriever(
            ts.queries, ts.docs, ts.mask, ts.user_emb, ts.teacher, c, init_targets=projection_targets(con, task)
        )
    params = {k: getattr(c, k) for k in _TRAIN_PARAMS} | {
        "temperature": c.retriever_temperature,
        "task": task,
        "samples": len(ts.sample_ids),
        "generator": generator_id,
        "user_encoder": encoder,
    }
    version = data_version(used, encoder, generator_id)
    return Trained("retriever", fitted.model, fitted.curve, params, version, time.perf_counter() - started, fitted)


def train_task_rerankers(con, task: str, settings: Settings, generator_id: str) -> list[Trained]:
    """The personalized reranker of one task and its ablation without e_u (§2.7, §2.8)."""
    from prag_models.methods.cfrag.reranker import train_reranker

    inputs, ts, used, encoder = load_training_set(con, task, settings, generator_id)
    queries = dict(zip(inputs.samples["sample_id"], inputs.samples["query"], strict=True))
    samples = rerank_samples(ts, queries, inputs.index.texts)
    out = []
    for kind, use_eu in (("reranker", True), ("reranker_no_eu", False)):
        c = settings.cfrag.model_copy(update={"reranker_use_user_embedding": use_eu})
        started = time.perf_counter()
        fitted = train_reranker(samples, c, model=new_reranker(c, int(ts.user_emb.shape[1])))
        params = {k: getattr(c, k) for k in _TRAIN_PARAMS if k not in ("alpha", "retriever_projection")}
        params |= {
            "temperature": c.reranker_temperature,
            "reranker_model": c.reranker_model,
            "max_length": c.reranker_max_length,
            "layers": c.reranker_layers,
            "use_user_embedding": use_eu,
            "task": task,
            "samples": len(samples),
            "generator": generator_id,
            "user_encoder": encoder,
        }
        version = data_version(used, encoder, generator_id, c.reranker_model)
        out.append(Trained(kind, fitted.model, fitted.curve, params, version, time.perf_counter() - started, fitted))
    return out
