"""CFRAG data preparation (docs/methods.md §2): histories, candidate lists, feedback prompts and scores, training sets,
the ablation variants (§2.8) and model probes.

Plain numpy/pandas glue between the DuckDB tables and the models; torch is imported only inside the functions that
run a model, so the Dagster definitions can import this module cheaply.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from prag_models.config import CfragSettings, Settings
from prag_models.data.tasks import TASK_KIND
from prag_models.generation import LABEL_SCORING, answer_mode, max_new_tokens_for
from prag_models.methods.profiles import ProfileIndex, Retrieved
from prag_models.metrics import sample_quality
from prag_models.prompts import PROMPT_VERSION, parse_output

#: Model kinds written to the ``cfrag_models`` table and registered in MLflow.
MODEL_KINDS: tuple[str, ...] = ("user_encoder", "retriever", "reranker", "reranker_no_eu")
#: Rows of a probe: how many users / queries and documents the load-back comparison scores.
PROBE_ROWS, PROBE_DOCS = 4, 6


@dataclass(frozen=True)
class Variant:
    """One CFRAG retrieval method: whose docs, how candidates are scored, how the final list is chosen (§2.8)."""

    method: str
    users: str  # encoder: top-m by the CFRAG user encoder | own: only the user | mean: top-m by mean doc embeddings
    retriever: str  # trained: S with the trained W | base: cos(q, d) | no_sud: α = 0
    reranker: str  # reranker | none: top final_k by retriever score | reranker_no_eu: reranker trained without e_u


#: Full CFRAG and the ablations of paper Table 3. With the frozen text encoders used here (E_q, E_d are the
#: embedder), α = 0 leaves S = cos(q, d): ``cfrag_no_sud`` retrieves exactly what ``cfrag_no_retriever_tuning`` does.
VARIANTS: tuple[Variant, ...] = (
    Variant("cfrag", "encoder", "trained", "reranker"),
    Variant("cfrag_no_user_retrieval", "own", "trained", "reranker"),
    Variant("cfrag_mean_user_emb", "mean", "trained", "reranker"),
    Variant("cfrag_no_retriever_tuning", "encoder", "base", "reranker"),
    Variant("cfrag_no_sud", "encoder", "no_sud", "reranker"),
    Variant("cfrag_no_reranker_tuning", "encoder", "trained", "none"),
    Variant("cfrag_no_reranker_eu", "encoder", "trained", "reranker_no_eu"),
)
CFRAG_METHODS: tuple[str, ...] = tuple(v.method for v in VARIANTS)


def final_k(settings: Settings) -> int:
    """Documents per prompt after reranking: ``cfrag.final_k``, or ``retrieval.k`` when it is 0."""
    return settings.cfrag.final_k or settings.retrieval.k


def user_histories(user_ids: Sequence[str]) -> dict[str, list[int]]:
    """Each user's rows of a document table already in profile order (user, position) — the encoder's histories."""
    out: dict[str, list[int]] = {}
    for row, user in enumerate(user_ids):
        out.setdefault(user, []).append(row)
    return out


def select_feedback_samples(sample_ids: Sequence[str], cap: int, seed: int) -> list[str]:
    """The training samples that get feedback labels: all when cap <= 0, else a seeded choice of cap, sorted."""
    ids = sorted(sample_ids)
    if cap <= 0 or len(ids) <= cap:
        return ids
    chosen = np.random.default_rng(seed).choice(len(ids), size=cap, replace=False)
    return sorted(ids[int(i)] for i in chosen)


def per_user_top_k(
    index: ProfileIndex,
    users: Sequence[str],
    k: int,
    scores_of: Callable[[np.ndarray], np.ndarray],
) -> list[Retrieved]:
    """The top-k docs of each user in turn by ``scores_of(rows)`` (ties keep profile order): m·k candidates (§2.4)."""
    out: list[Retrieved] = []
    for user in dict.fromkeys(users):
        rows = index.rows_by_user.get(user)
        if rows is None or len(rows) == 0:
            continue
        scores = np.asarray(scores_of(rows), dtype=np.float32)
        order = np.argsort(-scores, kind="stable")[:k]
        out += index.as_retrieved(rows[order], scores[order])
    return out


def cosine_scorer(index: ProfileIndex, query_vector: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Base dense relevance cos(q, d) of the given rows (unit vectors)."""
    q = np.asarray(query_vector, dtype=np.float32)
    return lambda rows: index.vectors[rows] @ q


def feedback_max_new_tokens(task: str, settings: Settings) -> int:
    """New-token budget of a feedback generation: the task's generation budget, capped by the CFRAG setting."""
    return min(settings.cfrag.feedback_max_new_tokens, max_new_tokens_for(task, settings.generator))


def feedback_prompt_version(task: str, settings: Settings) -> str:
    """The prompt part of the feedback-label key: prompt text version, CFRAG version, token budget or label scoring,
    and the teacher signal (gold log-likelihood labels never mix with metric labels)."""
    p = settings.prompt
    if settings.cfrag.feedback_signal == "gold_loglik":
        answer = "gll"
    elif answer_mode(task, settings.generator) == LABEL_SCORING:
        answer = "lsc" if settings.generator.label_calibration else "ls"
    else:
        answer = f"n{feedback_max_new_tokens(task, settings)}"
    return f"{PROMPT_VERSION}.{settings.cfrag.prompt_version}.L{p.max_prompt_tokens}.g{p.query_share}.{answer}"


def score_range(task: str, signal: str = "metric") -> tuple[float, float]:
    """Range of a feedback score: accuracy / ROUGE-1 in [0, 1], negated absolute rating error in [-4, 0]; a gold
    log-likelihood in (-inf, 0]."""
    if signal == "gold_loglik":
        return (-math.inf, 0.0)
    return (-4.0, 0.0) if TASK_KIND[task] == "rating" else (0.0, 1.0)


def gold_loglik_scores(generator: Any, prompts: Sequence[str], golds: Sequence[str]) -> list[float]:
    """The generator's log-probability of each gold output as the whole answer to its prompt (sum over tokens: the
    gold is the same for every candidate of a sample, so its length does not change how candidates compare)."""
    if not getattr(generator, "can_score_choices", False):
        raise ValueError(
            f"{generator.model_id} cannot score a given answer (no log-probabilities): "
            "set cfrag.feedback_signal = 'metric'"
        )
    return [float(generator.score_choices([p], [g])[0][0]) for p, g in zip(prompts, golds, strict=True)]


def score_outputs(task: str, outputs: Sequence[str], golds: Sequence[str]) -> list[float]:
    """Feedback score of each raw output against its gold: ``sample_quality`` of the parsed prediction (§2.5)."""
    # + 0.0 turns the -0.0 of a negated zero error into 0.0
    return [sample_quality(task, parse_output(task, o), g) + 0.0 for o, g in zip(outputs, golds, strict=True)]


def degenerate_samples(labels: pd.DataFrame) -> tuple[int, int]:
    """(samples whose candidates all scored the same, samples) of a feedback-label frame (sample_id, score)."""
    if labels.empty:
        return 0, 0
    spread = labels.groupby("sample_id")["score"].agg(lambda s: float(s.max() - s.min()))
    return int((spread <= 1e-12).sum()), len(spread)


@dataclass
class TrainingSet:
    """Feedback-labelled candidate lists of the training samples, padded to the longest list."""

    sample_ids: list[str]
    user_ids: list[str]
    queries: np.ndarray  # (n, d)
    rows: list[list[int]]  # candidate rows of the profile index per sample
    docs: np.ndarray  # (n, C, d)
    mask: np.ndarray  # (n, C) bool
    user_emb: np.ndarray  # (n, du) e_u of the querying user
    teacher: np.ndarray  # (n, C) feedback scores, 0 where padded


def training_set(
    index: ProfileIndex,
    samples: pd.DataFrame,
    candidates: Mapping[str, Sequence[Retrieved]],
    labels: pd.DataFrame,
    user_emb: Mapping[str, np.ndarray],
) -> TrainingSet:
    """Join each sample's candidates with their feedback scores (labels: sample_id, doc_id, source_user_id, score).

    ``samples`` has sample_id, user_id and the query vector ``embedding``; candidates without a label are dropped,
    samples without any labelled candidate are skipped.
    """
    score = {(r.sample_id, r.source_user_id, r.doc_id): float(r.score) for r in labels.itertuples(index=False)}
    kept: list[tuple[str, str, np.ndarray, list[int], list[float]]] = []
    for s in samples.itertuples(index=False):
        rows, scores = [], []
        for c in candidates.get(s.sample_id, []):
            key = (s.sample_id, c.source_user_id, c.doc_id)
            if key in score:
                rows.append(c.row)
                scores.append(score[key])
        if rows:
            kept.append((s.sample_id, s.user_id, np.asarray(s.embedding, dtype=np.float32), rows, scores))
    dim = index.vectors.shape[1]
    width = max((len(k[3]) for k in kept), default=0)
    du = len(next(iter(user_emb.values()))) if user_emb else dim
    docs = np.zeros((len(kept), width, dim), dtype=np.float32)
    mask = np.zeros((len(kept), width), dtype=bool)
    teacher = np.zeros((len(kept), width), dtype=np.float32)
    for i, (_, _, _, rows, scores) in enumerate(kept):
        docs[i, : len(rows)] = index.vectors[rows]
        mask[i, : len(rows)] = True
        teacher[i, : len(rows)] = scores
    return TrainingSet(
        sample_ids=[k[0] for k in kept],
        user_ids=[k[1] for k in kept],
        queries=np.stack([k[2] for k in kept]) if kept else np.zeros((0, dim), dtype=np.float32),
        rows=[k[3] for k in kept],
        docs=docs,
        mask=mask,
        user_emb=np.stack([np.asarray(user_emb[k[1]], dtype=np.float32) for k in kept])
        if kept
        else np.zeros((0, du), dtype=np.float32),
        teacher=teacher,
    )


def rerank_samples(ts: TrainingSet, query_texts: Mapping[str, str], doc_texts: Sequence[str]) -> list:
    """The reranker's training samples: (query text, candidate doc texts, feedback scores, e_u) per sample."""
    from prag_models.methods.cfrag.reranker import RerankSample

    return [
        RerankSample(
            query=query_texts[sid],
            candidates=[doc_texts[r] for r in rows],
            teacher_scores=[float(t) for t in ts.teacher[i, : len(rows)]],
            user_embedding=ts.user_emb[i],
            base_scores=[float(b) for b in ts.docs[i, : len(rows)] @ ts.queries[i]],
        )
        for i, (sid, rows) in enumerate(zip(ts.sample_ids, ts.rows, strict=True))
    ]


def new_reranker(settings: CfragSettings, user_dim: int) -> Any:
    """A fresh reranker (``build_reranker``) cut to its first ``reranker_layers`` Transformer layers (0 = all).

    The cut is saved with the model (the encoder config's ``num_hidden_layers``), so ``load_model`` rebuilds it.
    """
    from prag_models.methods.cfrag.reranker import build_reranker

    model = build_reranker(settings, user_dim)
    keep = settings.reranker_layers
    layers = getattr(getattr(model.encoder, "encoder", None), "layer", None)
    if keep > 0:
        if layers is None:
            raise ValueError(f"{settings.reranker_model}: cannot cut layers of {type(model.encoder).__name__}")
        if keep < len(layers):
            model.encoder.encoder.layer = layers[:keep]
            model.encoder.config.num_hidden_layers = keep
    return model


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch ops on one intra-op thread, then restore the previous count.

    The user encoder and the retriever are tiny: on a shared 2-core machine thread synchronisation costs more than it
    gains (measured: 20 encoder steps on the demo take 2 s on one thread, 3-9 s on two).
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def loss_trend(curve: Sequence[float]) -> tuple[float, float]:
    """(start, end) of a loss curve: means of its first and last max(1, min(5, n // 5)) steps (noise-robust)."""
    if not curve:
        return float("nan"), float("nan")
    width = max(1, min(5, len(curve) // 5))
    return float(np.mean(curve[:width])), float(np.mean(curve[-width:]))


@dataclass
class Probe:
    """Fixed inputs rebuilt from the tables to compare a trained model with its registered copy."""

    histories: list[list[int]]  # the first users' encoder histories
    queries: np.ndarray  # (p, d) query vectors of the first dev samples
    query_texts: list[str]
    user_emb: np.ndarray  # (p, du) CFRAG e_u of those samples' users (empty before user embeddings exist)
    doc_vectors: np.ndarray  # (PROBE_DOCS, d) the first documents of the profile index
    doc_texts: list[str]


def probe_scores(kind: str, model: object, probe: Probe) -> np.ndarray:
    """The scores (flattened) a model of the given kind gives on the probe inputs."""
    if kind == "user_encoder":
        from prag_models.methods.cfrag.user_encoder import encode_users

        return encode_users(model, probe.histories).ravel()  # type: ignore[arg-type]
    n, c = len(probe.queries), len(probe.doc_vectors)
    if kind == "retriever":
        from prag_models.methods.cfrag.retriever import retriever_scores

        docs = np.broadcast_to(probe.doc_vectors, (n, c, probe.doc_vectors.shape[1]))
        return retriever_scores(model, probe.queries, docs, probe.user_emb).ravel()  # type: ignore[arg-type]
    from prag_models.methods.cfrag.reranker import rerank_scores

    queries = [q for q in probe.query_texts for _ in range(c)]
    docs_t = [d for _ in probe.query_texts for d in probe.doc_texts]
    users = np.repeat(probe.user_emb, c, axis=0)
    base = (probe.queries @ probe.doc_vectors.T).ravel()
    return rerank_scores(model, queries, docs_t, users, base)  # type: ignore[arg-type]


def top_final(candidates: Sequence[Retrieved], scores: np.ndarray, k: int) -> list[Retrieved]:
    """The k candidates with the highest scores (ties keep candidate order), carrying those scores."""
    order = np.argsort(-np.asarray(scores, dtype=np.float32), kind="stable")[:k]
    return [
        Retrieved(candidates[i].row, candidates[i].doc_id, candidates[i].source_user_id, float(scores[i]))
        for i in order
    ]


def feedback_scores(
    task: str,
    generator: Any,
    prompts: Sequence[str],
    golds: Sequence[str],
    settings: Settings,
    con: Any,
    max_new_tokens: int,
) -> tuple[list[float], list[str], int]:
    """(score, output, model calls) of each feedback prompt, through the DuckDB caches (§2.5).

    ``gold_loglik``: the gold's log-probability (output = the gold); ``metric``: the task metric of the answer.
    """
    from prag_models.generation import answer_cached
    from prag_models.llm.cache import cached_outputs

    if settings.cfrag.feedback_signal == "gold_loglik":
        keyed = [f"{p}\n\u0000gold: {g}" for p, g in zip(prompts, golds, strict=True)]
        split = {k: (p, g) for k, p, g in zip(keyed, prompts, golds, strict=True)}

        def compute(batch: list[str]) -> list[str]:
            pairs = [split[k] for k in batch]
            return [repr(v) for v in gold_loglik_scores(generator, [p for p, _ in pairs], [g for _, g in pairs])]

        raw, ran = cached_outputs(con, f"{generator.model_id}#gold_loglik", 0, keyed, compute, 8)
        return [float(v) for v in raw], list(golds), ran
    outputs, ran = answer_cached(task, generator, list(prompts), settings.generator, con, None, max_new_tokens)
    return score_outputs(task, outputs, golds), outputs, ran
