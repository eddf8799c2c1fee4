"""CFRAG user encoder, its contrastive training and similar-user retrieval (docs/methods.md §2.1–2.3).

Document ids in a history index rows of the frozen document-embedding matrix (0 … num_docs−1); the encoder adds
two special ids after them: ``pad_id = num_docs`` (zero vector, ignored by attention and pooling) and
``mask_id = num_docs + 1`` (a learned [mask] vector used by the mask augmentation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from prag_models.config.settings import CfragSettings
from prag_models.methods.cfrag.augment import two_views

ProgressFn = Callable[[int, int], None]


class UserEncoder(nn.Module):
    """Doc-embedding table + learned positions + one post-norm Transformer layer, mean-pooled to e_u (§2.1)."""

    def __init__(
        self,
        num_docs: int,
        dim: int,
        max_len: int = 100,
        heads: int = 2,
        dropout: float = 0.1,
        finetune_doc_embeddings: bool = True,
        doc_weights: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        if num_docs < 1:
            raise ValueError("the user encoder needs at least one document embedding")
        self.num_docs, self.dim, self.max_len = int(num_docs), int(dim), int(max_len)
        self.heads, self.dropout = int(heads), float(dropout)
        self.finetune_doc_embeddings = bool(finetune_doc_embeddings)
        self.pad_id, self.mask_id = self.num_docs, self.num_docs + 1
        self.doc_rows: Any = None  # pyarrow Table (user_id, doc_id) of each table row, set by training (issue 26)
        if doc_weights is None:
            self.doc_table = nn.Embedding(self.num_docs, self.dim)
        else:  # wraps the tensor without copying it (at 3.7 M documents the table is 5.7 GB)
            self.doc_table = nn.Embedding.from_pretrained(doc_weights, freeze=True)
        self.doc_table.weight.requires_grad_(self.finetune_doc_embeddings)
        self.mask_embedding = nn.Parameter(torch.randn(self.dim) * 0.02)
        self.positions = nn.Embedding(self.max_len, self.dim)
        nn.init.normal_(self.positions.weight, std=0.02)
        self.layer = nn.TransformerEncoderLayer(
            self.dim,
            nhead=self.heads,
            dim_feedforward=self.dim,
            dropout=self.dropout,
            batch_first=True,
            norm_first=False,
        )
        self.eval()

    @classmethod
    def from_doc_embeddings(cls, doc_embeddings: np.ndarray, **kwargs: Any) -> UserEncoder:
        """Build an encoder whose doc table starts from the (L2-normalised) frozen-encoder embeddings (§2.1).

        A frozen table of unit-length float32 embeddings shares their memory; otherwise the table is one copy.
        """
        emb = np.asarray(doc_embeddings, dtype=np.float32)
        squares = np.einsum("ij,ij->i", emb, emb)  # no n x dim temporary, unlike np.linalg.norm
        if kwargs.get("finetune_doc_embeddings", True) or not np.allclose(squares, 1.0, atol=1e-4):
            emb = emb / np.sqrt(np.maximum(squares, 1e-24))[:, None]
        return cls(emb.shape[0], emb.shape[1], doc_weights=torch.from_numpy(np.ascontiguousarray(emb)), **kwargs)

    #: The constructor arguments :meth:`config` stores, each kept as the attribute of that name.
    CONFIG_FIELDS = ("num_docs", "dim", "max_len", "heads", "dropout", "finetune_doc_embeddings")

    def config(self) -> dict[str, Any]:
        """Constructor arguments, stored next to the weights by the serializer."""
        return {name: getattr(self, name) for name in self.CONFIG_FIELDS}

    def pad_batch(self, histories: Sequence[Sequence[int]]) -> torch.Tensor:
        """Right-padded id tensor of the last ``max_len`` docs of each history; an empty history becomes [mask]."""
        seqs = [list(h)[-self.max_len :] or [self.mask_id] for h in histories]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        return ids

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Encode a (B, L) id tensor to (B, dim) user embeddings: mean over non-pad positions (§2.1)."""
        pad = ids == self.pad_id
        emb = self.doc_table(ids.clamp(max=self.num_docs - 1))
        emb = torch.where((ids == self.mask_id).unsqueeze(-1), self.mask_embedding.expand_as(emb), emb)
        emb = emb.masked_fill(pad.unsqueeze(-1), 0.0)
        x = emb + self.positions(torch.arange(ids.shape[1], device=ids.device)).unsqueeze(0)
        hidden = self.layer(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1)
        hidden = torch.where(keep, hidden, torch.zeros_like(hidden))
        return hidden.sum(dim=1) / keep.sum(dim=1).clamp(min=1).to(hidden.dtype)


def info_nce(z1: torch.Tensor, z2: torch.Tensor, tau: float = 0.1) -> torch.Tensor:
    """SimCLR NT-Xent over 2B views: cosine/tau, the other view is the positive, the other 2B−2 negatives (§2.2)."""
    batch = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=-1)
    logits = (z @ z.T) / tau
    self_pairs = torch.eye(2 * batch, dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(self_pairs, float("-inf"))
    targets = torch.cat([torch.arange(batch, 2 * batch), torch.arange(0, batch)]).to(z.device)
    return F.cross_entropy(logits, targets)


def train_user_encoder(
    histories: Sequence[Sequence[int]],
    doc_embeddings: np.ndarray,
    settings: CfragSettings,
    progress: ProgressFn | None = None,
) -> tuple[UserEncoder, list[float]]:
    """Contrastive training of the user encoder (§2.2); returns the model (eval mode) and one loss per step.

    Seeded by ``settings.seed`` (torch RNG forked, so the caller's state is untouched). Adam (lr, weight decay),
    ``settings.epochs`` passes over the users with a non-empty history, split each epoch into near-equal batches of
    at most ``settings.batch_size`` (so no batch has a single user). Fewer than two such users: no training.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        rng = np.random.default_rng(settings.seed)
        model = UserEncoder.from_doc_embeddings(
            doc_embeddings,
            max_len=settings.max_history,
            heads=settings.heads,
            dropout=settings.dropout,
            finetune_doc_embeddings=settings.finetune_doc_embeddings,
        )
        seqs = [list(h)[-settings.max_history :] for h in histories]
        usable = np.array([i for i, s in enumerate(seqs) if s], dtype=np.int64)
        curve: list[float] = []
        if len(usable) < 2:
            return model, curve
        n_batches = max(1, -(-len(usable) // max(2, settings.batch_size)))
        if len(usable) // n_batches < 2:
            n_batches = len(usable) // 2
        total = n_batches * settings.epochs
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(params, lr=settings.lr, weight_decay=settings.weight_decay)
        model.train()
        ratios = {"crop_ratio": settings.crop_ratio, "mask_ratio": settings.mask_ratio,
                  "reorder_ratio": settings.reorder_ratio}  # fmt: skip
        for _ in range(settings.epochs):
            for batch in np.array_split(rng.permutation(usable), n_batches):
                views = [two_views(seqs[i], rng, model.mask_id, **ratios) for i in batch]
                ids = model.pad_batch([v[0] for v in views] + [v[1] for v in views])
                z = model(ids)
                loss = info_nce(z[: len(batch)], z[len(batch) :], settings.tau)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                curve.append(float(loss.detach()))
                if progress:
                    progress(len(curve), total)
        model.eval()
    return model, curve


def encode_users(model: UserEncoder, histories: Sequence[Sequence[int]], batch_size: int = 256) -> np.ndarray:
    """User embeddings e_u (n, dim) float32 in eval mode; the last ``max_len`` docs of each history are used (§2.1)."""
    was_training = model.training
    model.eval()
    out = np.zeros((len(histories), model.dim), dtype=np.float32)
    with torch.no_grad():
        for start in range(0, len(histories), batch_size):
            chunk = histories[start : start + batch_size]
            out[start : start + len(chunk)] = model(model.pad_batch(chunk)).numpy()
    model.train(was_training)
    return out


def top_m_similar_users(user_emb: np.ndarray, m: int, include_self: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Top-m users by cosine (FAISS IndexFlatIP on normalised vectors) for every user (§2.3).

    With ``include_self`` the user itself is always first and m−1 others follow (code: user_topk = 6 → self + 5);
    otherwise m other users. Returns (indices int64, scores float32), both (n, w) with w = min(m, n) or
    min(m, n−1), rows ordered by decreasing similarity after the self entry.
    """
    import faiss

    x = np.ascontiguousarray(user_emb, dtype=np.float32)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    n = x.shape[0]
    width = min(m, n) if include_self else min(m, max(n - 1, 0))
    indices = np.zeros((n, width), dtype=np.int64)
    scores = np.zeros((n, width), dtype=np.float32)
    if n == 0 or width == 0:
        return indices, scores
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    found_scores, found = index.search(x, min(n, m + 1))
    for i in range(n):
        others = [(int(j), float(s)) for j, s in zip(found[i], found_scores[i], strict=True) if j != i and j >= 0]
        row = ([(i, float(x[i] @ x[i]))] + others[: width - 1]) if include_self else others[:width]
        indices[i] = [j for j, _ in row]
        scores[i] = [s for _, s in row]
    return indices, scores
