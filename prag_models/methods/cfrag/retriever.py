"""CFRAG personalized retriever and the LLM-feedback distillation loss (docs/methods.md §2.4–2.6).

The text encoders E_q and E_d are the frozen embedder: queries and documents arrive as pre-computed vectors, so the
trainable part of the retriever is the user projection W (one linear layer as in the authors' code, or the paper's
MLP via ``projection="mlp"``) or, with ``projection="diagonal"`` (prag's default), a diagonal metric over the
personalized term while W stays at its ridge start (§2.6: W itself memorises the ~100 users it is trained on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from prag_models.config.settings import CfragSettings

if TYPE_CHECKING:
    from prag_models.methods.cfrag.fit import FitResult

ProgressFn = Callable[[int, int], None]
PROJECTIONS: tuple[str, ...] = ("diagonal", "linear", "mlp")


class PersonalizedRetriever(nn.Module):
    """S(q, d, u) = (1−α)·cos(q, d) + α·cos(W·e_u, d) over candidate documents (§2.4); with the diagonal projection
    the personal term is cos(g ⊙ W·e_u, g ⊙ d), g learnt from all ones and W kept at its ridge start.

    α starts at the configured value and is learnable (``alpha_shift`` moves its logit; kept at 0 when
    ``cfrag.learn_alpha`` is off), so training can give the personalized term the weight that reorders a list. α = 0
    (the w/o S_u,d ablation) stays 0. ``log_scale`` sharpens the student's distribution in the distillation loss only
    (softmax(e^s·S/T)): it lets the student match a sharp teacher without bending the ranking, which it cannot change.
    """

    def __init__(self, user_dim: int, doc_dim: int, alpha: float = 0.1, projection: str = "linear") -> None:
        super().__init__()
        if projection not in PROJECTIONS:
            raise ValueError(f"projection must be one of {PROJECTIONS}, got {projection!r}")
        self.user_dim, self.doc_dim = int(user_dim), int(doc_dim)
        self.alpha, self.projection = float(alpha), projection
        if projection in ("linear", "diagonal"):
            self.proj: nn.Module = nn.Linear(self.user_dim, self.doc_dim)
        else:  # paper variant: a two-layer MLP with a Tanh in between
            self.proj = nn.Sequential(
                nn.Linear(self.user_dim, self.doc_dim), nn.Tanh(), nn.Linear(self.doc_dim, self.doc_dim)
            )
        self.alpha_shift = nn.Parameter(torch.zeros(()))
        self.log_scale = nn.Parameter(torch.zeros(()))
        # the diagonal metric g: which dimensions of the document space the personal term compares (1 = plain cosine)
        self.metric = nn.Parameter(torch.ones(self.doc_dim)) if projection == "diagonal" else None
        self.eval()

    def mixing_weight(self) -> torch.Tensor:
        """The α in use: the configured α moved by the learnt shift of its logit (an α of 0 or 1 stays fixed)."""
        if not 0.0 < self.alpha < 1.0:
            return torch.tensor(self.alpha)
        return torch.sigmoid(torch.logit(torch.tensor(self.alpha)) + self.alpha_shift)

    def effective_alpha(self) -> float:
        """The α the retriever ranks with, as a number (metadata, registry tags)."""
        return float(self.mixing_weight().detach())

    def distill_scores(self, queries: torch.Tensor, docs: torch.Tensor, user_emb: torch.Tensor) -> torch.Tensor:
        """The student's scores in the distillation loss: e^s · S (the same ranking as ``forward``)."""
        return self(queries, docs, user_emb) * self.log_scale.exp()

    def config(self) -> dict[str, Any]:
        """Constructor arguments, stored next to the weights by the serializer."""
        return {"user_dim": self.user_dim, "doc_dim": self.doc_dim, "alpha": self.alpha, "projection": self.projection}

    def forward(self, queries: torch.Tensor, docs: torch.Tensor, user_emb: torch.Tensor) -> torch.Tensor:
        """Scores (n, C) for queries (n, d), candidate docs (n, C, d) and the querying user's e_u (n, du)."""
        q = F.normalize(queries, dim=-1)
        d = F.normalize(docs, dim=-1)
        u = F.normalize(self.proj(user_emb), dim=-1)
        relevance = torch.einsum("nd,ncd->nc", q, d)
        if self.metric is not None:
            u, d = F.normalize(u * self.metric, dim=-1), F.normalize(d * self.metric, dim=-1)
        personal = torch.einsum("nd,ncd->nc", u, d)
        alpha = self.mixing_weight()
        return (1.0 - alpha) * relevance + alpha * personal


def retriever_scores(
    model: PersonalizedRetriever, queries: np.ndarray, docs: np.ndarray, user_emb: np.ndarray
) -> np.ndarray:
    """Numpy convenience around ``model(...)`` without gradients: (n, d), (n, C, d), (n, du) → (n, C)."""
    with torch.no_grad():
        out = model(_tensor(queries), _tensor(docs), _tensor(user_emb))
    return out.numpy()


def kl_loss(
    student_scores: torch.Tensor, teacher_scores: torch.Tensor, mask: torch.Tensor, temperature: float
) -> torch.Tensor:
    """KL(teacher ‖ student) over padded candidate lists, batchmean (§2.5–2.6).

    p = softmax(S/T) and p_LLM = softmax(teacher/T) are taken over the valid candidates only (``mask`` True):
    a padded candidate gets probability exactly zero in both and contributes nothing. A row without any valid
    candidate contributes zero but still counts in the batch mean.
    """
    valid = mask.to(torch.bool)
    has_any = valid.any(dim=1, keepdim=True)
    softmax_mask = valid | ~has_any  # fully padded rows: a harmless uniform softmax, zeroed below
    neg_inf = torch.tensor(float("-inf"), dtype=student_scores.dtype, device=student_scores.device)
    log_p = F.log_softmax(torch.where(softmax_mask, student_scores / temperature, neg_inf), dim=-1)
    q = F.softmax(torch.where(softmax_mask, teacher_scores.to(student_scores.dtype) / temperature, neg_inf), dim=-1)
    log_p = torch.where(valid, log_p, torch.zeros_like(log_p))
    q = torch.where(valid, q, torch.zeros_like(q))
    return F.kl_div(log_p, q, reduction="batchmean")


def ridge_map(user_emb: np.ndarray, targets: np.ndarray, ridge: float = 1e-2) -> np.ndarray:
    """The ridge least-squares map (du + 1, d) from e_u (with a bias column, the last row) to each user's z_u."""
    e = np.asarray(user_emb, dtype=np.float64)
    x = np.hstack([e, np.ones((len(e), 1))])
    return np.linalg.solve(x.T @ x + ridge * np.eye(x.shape[1]), x.T @ np.asarray(targets, dtype=np.float64))


def init_projection(
    model: PersonalizedRetriever, user_emb: np.ndarray, targets: np.ndarray, ridge: float = 1e-2
) -> None:
    """Start W where it already means something: the ridge least-squares map from e_u to the user's mean document
    embedding (z_u), so that cos(W·e_u, d) begins as "how typical d is of the user's history" instead of noise.
    Only for the linear and diagonal projections; the MLP keeps its random initialisation."""
    if model.projection not in ("linear", "diagonal") or len(user_emb) == 0:
        return
    w = ridge_map(user_emb, targets, ridge)
    with torch.no_grad():
        model.proj.weight.copy_(torch.as_tensor(w[:-1].T, dtype=torch.float32))
        model.proj.bias.copy_(torch.as_tensor(w[-1], dtype=torch.float32))


def train_retriever(
    queries: np.ndarray,
    docs: np.ndarray,
    mask: np.ndarray,
    user_emb: np.ndarray,
    teacher_scores: np.ndarray,
    settings: CfragSettings,
    progress: ProgressFn | None = None,
    model: PersonalizedRetriever | None = None,
    init_targets: tuple[np.ndarray, np.ndarray] | None = None,
    relevance: np.ndarray | None = None,
    truth_only: int = 0,
) -> FitResult:
    """Distil LLM feedback into the retriever (§2.6): KL at T = retriever_temperature, with the shared training loop
    (epochs, validation split, early stopping; ``fit``).

    Inputs: queries (n, d), candidate docs (n, C, d), mask (n, C) of valid candidates, e_u (n, du), teacher scores
    (n, C). ``init_targets`` = (e_u of every user, z_u of every user) sets W's starting point (``init_projection``).
    ``relevance`` (n, C): 0/1 truth of each candidate (NaN unknown) for model selection on validation; the last
    ``truth_only`` samples have no feedback labels (validation only).
    """
    from prag_models.methods.cfrag.fit import fit, ndcg, relevance_ndcg_samples, teacher_headroom

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        if model is None:
            model = PersonalizedRetriever(
                user_emb.shape[1], queries.shape[1], settings.alpha, settings.retriever_projection
            )
            if init_targets is not None:
                init_projection(model, *init_targets)
        model.alpha_shift.requires_grad_(settings.learn_alpha)
        if model.projection == "diagonal":  # W stays at its ridge start: the metric, α and the scale learn
            model.proj.requires_grad_(False)
        q_t, d_t, u_t = _tensor(queries), _tensor(docs), _tensor(user_emb)
        m_t, t_t = torch.as_tensor(np.asarray(mask, dtype=bool)), _tensor(teacher_scores)
        temperature = settings.retriever_temperature

        def batch_loss(m: nn.Module, idx) -> torch.Tensor:  # noqa: ANN001 - index list
            i = torch.as_tensor(list(idx))
            return kl_loss(m.distill_scores(q_t[i], d_t[i], u_t[i]), t_t[i], m_t[i], temperature)

        def evaluate(m: nn.Module, idx) -> tuple[float, float, np.ndarray]:  # noqa: ANN001 - index list
            if not len(idx):
                return float("nan"), float("nan"), np.array([])
            i = torch.as_tensor(list(idx))
            scores = m(q_t[i], d_t[i], u_t[i])
            kl = float(kl_loss(m.distill_scores(q_t[i], d_t[i], u_t[i]), t_t[i], m_t[i], temperature))
            k, mask_i = max(1, settings.final_k or 3), m_t[i].numpy()
            gains = None if relevance is None else np.asarray(relevance, dtype=np.float32)[list(idx)]
            return (kl, ndcg(scores.numpy(), t_t[i].numpy(), mask_i, k),
                    relevance_ndcg_samples(scores.numpy(), gains, mask_i, k))  # fmt: skip

        labelled = torch.arange(len(queries) - truth_only)
        with torch.no_grad():
            start = model(q_t[labelled], d_t[labelled], u_t[labelled]).numpy()
        result = fit(model, len(queries), batch_loss, evaluate, settings, progress, truth_only)
        if relevance is not None and len(labelled):
            gains = np.asarray(relevance, dtype=np.float32)[: len(labelled)]
            result.headroom = teacher_headroom(t_t[labelled].numpy(), start, gains, m_t[labelled].numpy(),
                                               max(1, settings.final_k or 3))  # fmt: skip
        return result


def _tensor(array: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A float32 tensor view of a numpy array (or the tensor itself)."""
    if isinstance(array, torch.Tensor):
        return array.float()
    return torch.as_tensor(np.asarray(array, dtype=np.float32))
