"""Training loop shared by the CFRAG retriever and reranker: epochs, a held-out validation split of the feedback
samples, validation KL, NDCG against the teacher and NDCG against the task's truth per epoch (epoch 0 = the untrained
initialisation), early stopping that restores the best epoch by ``cfrag.selection_metric``, a significance gate that
keeps the initialisation unless the best epoch's validation gain over it is shown by a paired bootstrap interval, and
whether training improved on the initialisation (docs/methods.md §2.6)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from prag_models.config.settings import CfragSettings
from prag_models.metrics.intervals import Bootstrap, paired_difference
from prag_models.storage.faults import maybe_fail

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class EpochRecord:
    """Training loss (mean over the epoch's steps) and the validation figures after an epoch (0 = before training):
    KL to the teacher, NDCG@k against the teacher, NDCG@k against the truth (NaN where none is known)."""

    epoch: int
    train_loss: float
    val_kl: float
    val_ndcg: float
    val_relevance: float = math.nan
    #: per validation sample NDCG@k against the truth (NaN where the sample's candidates are all equally right)
    val_relevance_samples: tuple[float, ...] = field(default=(), repr=False, compare=False)
    #: per validation sample KL (filled for epoch 0 and the best epoch when selection is by KL)
    val_kl_samples: tuple[float, ...] = field(default=(), repr=False, compare=False)

    def better_than(self, other: EpochRecord, by: str) -> bool:
        """Whether this epoch beats ``other`` on the selection metric (higher relevance NDCG, or lower KL); a tie in
        relevance NDCG (a step function on a few validation samples) is broken by the KL, so training can go on
        through a plateau instead of stopping early with epoch 0."""
        lower_kl = self.val_kl < other.val_kl - 1e-9
        if by == "relevance":
            tie = abs(self.val_relevance - other.val_relevance) <= 1e-9
            return self.val_relevance > other.val_relevance + 1e-9 or (tie and lower_kl)
        return lower_kl


@dataclass
class FitResult:
    """The trained model (best epoch restored), the per-step loss curve and the per-epoch history."""

    model: torch.nn.Module
    curve: list[float]
    history: list[EpochRecord] = field(default_factory=list)
    best_epoch: int = 0
    validation_samples: int = 0
    selected_by: str = "kl"
    #: samples without feedback labels on whose truth the gate tests the selected epoch (held out from selection)
    truth_validation_samples: int = 0
    #: the paired validation gain of the best trained epoch over the initialisation (value, low, high, n) and what
    #: the significance gate decided ("" when it did not run)
    gain: tuple[float, float, float, int] | None = None
    gate: str = ""
    #: truth NDCG of the teacher's own ranking minus the initialisation's on the labelled samples (value, low, high,
    #: n, teacher mean, initialisation mean): what distilling the teacher could at best add (None without truth)
    headroom: tuple[float, float, float, int, float, float] | None = None

    @property
    def improved(self) -> bool:
        """Whether the kept model beats the untrained initialisation on validation by the selection metric."""
        return self.best_epoch > 0 and self.history[self.best_epoch].better_than(self.history[0], self.selected_by)

    def summary(self) -> dict[str, float | int | bool]:
        """Initial and best validation figures, for MLflow tags and the asset metadata."""
        init, best = self.history[0], self.history[self.best_epoch]
        return {
            "val_kl_init": round(init.val_kl, 6), "val_kl_best": round(best.val_kl, 6),
            "val_ndcg_init": round(init.val_ndcg, 4), "val_ndcg_best": round(best.val_ndcg, 4),
            "val_relevance_init": round(init.val_relevance, 4), "val_relevance_best": round(best.val_relevance, 4),
            "selected_by": self.selected_by, "best_epoch": self.best_epoch, "epochs_run": len(self.history) - 1,
            "improved": self.improved,
            "validation_samples": self.validation_samples,
            "truth_validation_samples": self.truth_validation_samples,
            **({"val_gain": round(self.gain[0], 4), "val_gain_low": round(self.gain[1], 4),
                "val_gain_high": round(self.gain[2], 4), "val_gain_n": self.gain[3]} if self.gain else {}),
            **({"gate": self.gate} if self.gate else {}),
            **({"teacher_truth_ndcg": round(self.headroom[4], 4), "init_truth_ndcg": round(self.headroom[5], 4),
                "teacher_gain": round(self.headroom[0], 4), "teacher_gain_low": round(self.headroom[1], 4),
                "teacher_gain_high": round(self.headroom[2], 4), "teacher_gain_n": self.headroom[3]}
               if self.headroom else {}),
        }  # fmt: skip


def split_validation(n: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) sample indices: a seeded ``share`` of n held out (at least 1 when n ≥ 4 and share > 0)."""
    order = np.random.default_rng(seed).permutation(n)
    n_val = 0 if share <= 0 or n < 4 else max(1, int(round(share * n)))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def ndcg(student: np.ndarray, teacher: np.ndarray, mask: np.ndarray, k: int) -> float:
    """Mean NDCG@k of the student's candidate ranking with graded gains teacher − min(teacher) per sample."""
    values = []
    for s, t, m in zip(student, teacher, mask, strict=True):
        s, t = s[m], t[m]
        if len(t) == 0:
            continue
        gains = t - t.min()
        ideal = np.sort(gains)[::-1][:k]
        discounts = 1.0 / np.log2(np.arange(2, len(ideal) + 2))
        best = float(ideal @ discounts)
        got = gains[np.argsort(-s, kind="stable")[:k]]
        values.append(float(got @ discounts[: len(got)]) / best if best > 0 else 1.0)
    return float(np.mean(values)) if values else math.nan


def relevance_ndcg_samples(student: np.ndarray, gains: np.ndarray | None, mask: np.ndarray, k: int) -> np.ndarray:
    """NDCG@k of the student's ranking against known 0/1 gains, per sample; NaN where gains are unknown or the
    sample's candidates are all equally right (nothing to rank)."""
    out = np.full(len(student), np.nan)
    if gains is None:
        return out
    for i in range(len(student)):
        if np.ptp(np.nan_to_num(gains[i][mask[i]], nan=0.0)) > 0:
            out[i] = ndcg(student[i : i + 1], np.nan_to_num(gains[i : i + 1], nan=0.0), mask[i : i + 1], k)
    return out


def relevance_ndcg(student: np.ndarray, gains: np.ndarray | None, mask: np.ndarray, k: int) -> float:
    """Mean NDCG@k of the student's ranking against known 0/1 gains, over samples whose candidates are not all equally
    right (NaN where gains are unknown or no sample discriminates)."""
    values = relevance_ndcg_samples(student, gains, mask, k)
    return float(np.nanmean(values)) if np.isfinite(values).any() else math.nan


def teacher_headroom(
    teacher: np.ndarray, init: np.ndarray, gains: np.ndarray | None, mask: np.ndarray, k: int
) -> tuple[float, float, float, int, float, float] | None:
    """Truth NDCG@k of the teacher's ranking minus the untrained model's, per sample whose candidates are not all
    equally right, with its paired 95 % interval (value, low, high, n, teacher mean, init mean); None without truth.
    Distillation moves the model towards the teacher, so when this is not above 0 training has nothing to gain."""
    t = relevance_ndcg_samples(teacher, gains, mask, k)
    i = relevance_ndcg_samples(init, gains, mask, k)
    keep = np.isfinite(t) & np.isfinite(i)
    if not keep.any():
        return None
    est = paired_difference(t[keep], i[keep])
    return est.value, est.low, est.high, est.n, float(t[keep].mean()), float(i[keep].mean())


def significance_gate(
    result: FitResult, confidence: float, held_out: tuple[np.ndarray, np.ndarray] | None = None
) -> bool:
    """Whether the best trained epoch's gain over the initialisation is shown (paired bootstrap interval at
    ``confidence`` above 0): per-sample truth NDCG gained on the held-out truth samples (``held_out`` = best's and
    the initialisation's values), else on the validation samples, or with KL selection per-sample KL lost; records
    the gain and the decision on ``result``. Always True for ``confidence`` 0 (no gate)."""
    if confidence <= 0 or result.best_epoch == 0:
        return True
    best, init = result.history[result.best_epoch], result.history[0]
    if held_out is not None:
        a, b = held_out
    elif result.selected_by == "relevance":
        a, b = np.asarray(best.val_relevance_samples), np.asarray(init.val_relevance_samples)
    else:  # the gain is the KL the trained epoch lost: initial minus best, per sample
        a, b = np.asarray(init.val_kl_samples), np.asarray(best.val_kl_samples)
    keep = np.isfinite(a) & np.isfinite(b)
    est = paired_difference(a[keep], b[keep], bootstrap=Bootstrap(confidence=confidence))
    result.gain = (est.value, est.low, est.high, est.n)
    shown = est.n > 1 and est.low > 0
    what = ("held-out truth gain" if held_out is not None else
            "validation gain" if result.selected_by == "relevance" else "validation KL decrease")  # fmt: skip
    result.gate = (f"epoch {result.best_epoch} kept: {what} {est.value:+.4f} [{est.low:+.4f}, "
                   f"{est.high:+.4f}], n={est.n}" if shown else
                   f"initialisation kept: epoch {result.best_epoch}'s {what} {est.value:+.4f} [{est.low:+.4f}"
                   f", {est.high:+.4f}] (n={est.n}) is not shown at {confidence:.0%}")  # fmt: skip
    return shown


def fit(
    model: torch.nn.Module,
    n: int,
    batch_loss: Callable[[torch.nn.Module, Sequence[int]], torch.Tensor],
    evaluate: Callable[[torch.nn.Module, Sequence[int]], tuple[float, float, float]],
    settings: CfragSettings,
    progress: ProgressFn | None = None,
    truth_only: int = 0,
) -> FitResult:
    """Train with Adam (lr = train_lr) in seeded mini-batches for up to train_epochs epochs, keep the best epoch on
    validation by ``selection_metric`` (relevance NDCG where the truth is known, else KL; the initialisation counts
    as epoch 0), stop after early_stopping_patience epochs without improvement. Without a validation split (too few
    samples) the training samples stand in for it. ``evaluate`` returns (KL, teacher NDCG, relevance NDCG per sample).
    A trained epoch replaces the initialisation only when ``significance_gate`` shows its gain: on the last
    ``truth_only`` of the n samples when there are any (no feedback labels, never trained on nor used for selection:
    a held-out test of the selected epoch on the truth), else on the validation samples."""
    labelled = n - truth_only
    train_idx, val_idx = split_validation(labelled, settings.validation_share, settings.seed)
    judge = val_idx if len(val_idx) else train_idx

    rng = np.random.default_rng(settings.seed)
    optimizer = torch.optim.Adam(_param_groups(model, settings))
    batch = max(1, settings.train_batch_size)
    steps_per_epoch = -(-len(train_idx) // batch)
    total = settings.train_epochs * steps_per_epoch
    model.eval()
    with torch.no_grad():
        kl0, ndcg0, rel0 = evaluate(model, judge)
        train0 = evaluate(model, train_idx)[0]
    by = "relevance" if settings.selection_metric == "relevance" and np.isfinite(rel0).any() else "kl"
    result = FitResult(model, [], [_record(0, train0, kl0, ndcg0, rel0)], 0, len(val_idx), by, truth_only)
    if by == "kl":
        result.history[0] = replace(result.history[0], val_kl_samples=_kl_samples(model, evaluate, judge))
    init_state = copy.deepcopy(model.state_dict())
    best_state, since_best = init_state, 0
    for epoch in range(1, settings.train_epochs + 1):
        model.train()
        losses = []
        order = train_idx[rng.permutation(len(train_idx))]
        for start in range(0, len(order), batch):
            loss = batch_loss(model, order[start : start + batch].tolist())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            result.curve.append(losses[-1])
            if progress:
                progress(len(result.curve), total)
        model.eval()
        with torch.no_grad():
            kl, score, rel = evaluate(model, judge)
        record = _record(epoch, float(np.mean(losses)) if losses else math.nan, kl, score, rel)
        result.history.append(record)
        maybe_fail("training_epoch")  # reliability tests (prag_models/storage/faults.py): die after an epoch
        if record.better_than(result.history[result.best_epoch], by):
            result.best_epoch, best_state, since_best = epoch, copy.deepcopy(model.state_dict()), 0
        else:
            since_best += 1
            if settings.early_stopping_patience and since_best >= settings.early_stopping_patience:
                break
    model.load_state_dict(best_state)
    model.eval()
    if by == "kl" and result.best_epoch:
        best = result.history[result.best_epoch]
        result.history[result.best_epoch] = replace(best, val_kl_samples=_kl_samples(model, evaluate, judge))
    held_out = None
    if truth_only and result.best_epoch:
        extra = list(range(labelled, n))
        with torch.no_grad():
            best_rel = evaluate(model, extra)[2]
            model.load_state_dict(init_state)
            held_out = (np.asarray(best_rel), np.asarray(evaluate(model, extra)[2]))
            model.load_state_dict(best_state)
        model.eval()
    if not significance_gate(result, settings.selection_confidence, held_out):
        result.best_epoch = 0
        model.load_state_dict(init_state)
    return result


def _param_groups(model: torch.nn.Module, settings: CfragSettings) -> list[dict]:
    """Adam's parameter groups: a model's pretrained ``encoder`` (the reranker's cross-encoder) at
    cfrag.reranker_encoder_lr (frozen at 0), single numbers (the retriever's α shift and scale) at
    cfrag.retriever_scalar_lr, the retriever's diagonal metric at cfrag.retriever_metric_lr, everything else at
    cfrag.train_lr."""
    encoder = getattr(model, "encoder", None)
    pretrained = {id(p) for p in encoder.parameters()} if isinstance(encoder, torch.nn.Module) else set()
    metric = getattr(model, "metric", None)
    special = pretrained | ({id(metric)} if isinstance(metric, torch.nn.Parameter) else set())
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in special]
    groups = [{"params": [p for p in rest if p.dim() > 0], "lr": settings.train_lr}]
    if isinstance(metric, torch.nn.Parameter) and metric.requires_grad:
        groups.append({"params": [metric], "lr": settings.retriever_metric_lr})
    scalars = [p for p in rest if p.dim() == 0]
    if scalars:
        groups.append({"params": scalars, "lr": settings.retriever_scalar_lr})
    if pretrained and settings.reranker_encoder_lr > 0:
        groups.append({"params": [p for p in encoder.parameters() if p.requires_grad],
                       "lr": settings.reranker_encoder_lr})  # fmt: skip
    return [g for g in groups if g["params"]]


def _kl_samples(model: torch.nn.Module, evaluate: Callable, idx: Sequence[int]) -> tuple[float, ...]:
    """The validation KL of each sample alone (the batch-mean KL of a one-sample batch)."""
    with torch.no_grad():
        return tuple(float(evaluate(model, [int(i)])[0]) for i in idx)


def _record(epoch: int, train_loss: float, kl: float, score: float, rel: np.ndarray) -> EpochRecord:
    """An epoch's record from the evaluation (relevance NDCG as the mean of the per-sample values)."""
    rel = np.asarray(rel, dtype=np.float64)
    mean = float(np.nanmean(rel)) if np.isfinite(rel).any() else math.nan
    return EpochRecord(epoch, train_loss, kl, score, mean, tuple(float(v) for v in rel))
