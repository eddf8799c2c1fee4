"""Community-wide retrieval (ClusterRAG extension, docs/methods.md §5).

With thin profiles the few documents of a handful of neighbours rarely cover what a query is about, while a
non-personalized retriever over everyone finds the topic, often with another community's label. This mode searches
the documents of the user's whole cluster (or of its top-N most similar users) and ranks them by query similarity
plus user similarity: score(d) = cos(q, d) + w · cos(z_u, z_author(d)). One FAISS index per cluster is built once
and shared by every query of that cluster; the query-only shortlist (``shortlist`` × k documents) is re-scored with
the user term.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from prag_models.methods.profiles import ProfileIndex, Retrieved
from prag_models.methods.vector_index import flat_index, search

SHORTLIST = 10  # × k documents taken by query similarity before the user term re-ranks them


@dataclass
class CommunityRetriever:
    """Per-cluster FAISS indexes over one task's documents, with the users' embeddings z_u."""

    index: ProfileIndex
    cluster_of: Mapping[str, int]
    user_vectors: Mapping[str, np.ndarray]  # unit z_u per user
    user_weight: float = 0.5
    top_n: int = 0  # > 0: the top-N most similar users instead of the cluster
    _pools: dict[tuple[int, str | None], tuple[np.ndarray, object]] = field(default_factory=dict, init=False)

    def members(self, user_id: str) -> list[str]:
        """Whose documents the user's retrieval searches: its cluster, or its top-N users by cos(z_u, z_v)."""
        if self.top_n > 0:
            users = list(self.user_vectors)
            sims = np.stack([self.user_vectors[v] for v in users]) @ self._vector(user_id)
            order = np.argsort(-sims, kind="stable")[: self.top_n]
            return list(dict.fromkeys([user_id, *(users[int(i)] for i in order)]))
        cluster = self.cluster_of.get(user_id)
        return [u for u, c in self.cluster_of.items() if c == cluster] if cluster is not None else [user_id]

    def _vector(self, user_id: str) -> np.ndarray:
        """z_u (zeros for a user without an embedding: the user term then adds nothing)."""
        dim = len(next(iter(self.user_vectors.values()))) if self.user_vectors else self.index.vectors.shape[1]
        return np.asarray(self.user_vectors.get(user_id, np.zeros(dim)), dtype=np.float32)

    def _pool(self, user_id: str) -> tuple[np.ndarray, object | None]:
        """(rows, FAISS index) of the documents of the user's pool the user may see (docs/privacy.md); cached per
        cluster for users who share all their documents (they all see the same rows), per user otherwise."""
        if self.top_n > 0 or user_id not in self.cluster_of:
            return self.index.visible_rows(user_id, self.members(user_id)), None
        cluster = self.cluster_of[user_id]
        key = (cluster, None if self.index.shares_all(user_id) else user_id)
        if key not in self._pools:
            rows = self.index.visible_rows(user_id, self.members(user_id))
            self._pools[key] = (rows, flat_index(self.index.vectors[rows]) if len(rows) else None)
        return self._pools[key]

    def retrieve(self, user_id: str, query_vector: np.ndarray, k: int) -> list[Retrieved]:
        """The k pool documents with the highest cos(q, d) + w · cos(z_u, z_author)."""
        rows, faiss_index = self._pool(user_id)
        if len(rows) == 0:
            return []
        scores, local = search(self.index.vectors[rows], query_vector, SHORTLIST * k, faiss_index)
        local = local[0][local[0] >= 0]
        candidates = rows[local]
        authors = [self.index.user_ids[int(r)] for r in candidates]
        user_term = np.asarray([float(self._vector(a) @ self._vector(user_id)) for a in authors], dtype=np.float32)
        combined = scores[0][: len(local)] + self.user_weight * user_term
        order = np.argsort(-combined, kind="stable")[:k]
        return self.index.as_retrieved(candidates[order], combined[order])


def retrieve_all(retriever: CommunityRetriever, samples: Sequence[tuple[str, np.ndarray]], k: int) -> list:
    """Community-wide retrieval for (user_id, query vector) pairs, in order."""
    return [retriever.retrieve(user, np.asarray(q, dtype=np.float32), k) for user, q in samples]
