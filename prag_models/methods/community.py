"""Community-wide retrieval (ClusterRAG extension, docs/methods.md §5).

With thin profiles the few documents of a handful of neighbours rarely cover what a query is about, while a
non-personalized retriever over everyone finds the topic, often with another community's label. This mode searches
the documents of the user's whole cluster (or of its top-N most similar users) and ranks them by query similarity
plus user similarity: score(d) = cos(q, d) + w · cos(z_u, z_author(d)). The query-only shortlist (``shortlist`` × k
documents) is re-scored with the user term.

At scale the queries of one cluster are searched together, exactly, over the cluster's shareable rows (the pool every
member sees of the others, a block of rows at a time: no copy of the pool), merged with each non-sharing member's
own rows; the user term is one product with the authors' z rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from prag_models.methods.profiles import ProfileIndex, Retrieved
from prag_models.methods.vector_index import knn_rows, merge_top_k

SHORTLIST = 10  # × k documents taken by query similarity before the user term re-ranks them


@dataclass
class CommunityRetriever:
    """Cluster-wide retrieval over one task's documents, with the users' embeddings z_u."""

    index: ProfileIndex
    cluster_of: Mapping[str, int]
    user_vectors: Mapping[str, np.ndarray]  # unit z_u per user
    user_weight: float = 0.5
    top_n: int = 0  # > 0: the top-N most similar users instead of the cluster
    _members: dict[int, list[str]] = field(default_factory=dict, init=False)
    _z: np.ndarray = field(init=False, repr=False)  # z of each index owner (zeros without an embedding)

    def __post_init__(self) -> None:
        for user, cluster in self.cluster_of.items():
            self._members.setdefault(cluster, []).append(user)
        names = self.index.users
        self._z = np.zeros((len(names), self._dim()), dtype=np.float32)
        for i, name in enumerate(names):
            if name in self.user_vectors:
                self._z[i] = self.user_vectors[name]

    def _dim(self) -> int:
        """Dimension of z (the documents' when no user has one)."""
        return len(next(iter(self.user_vectors.values()))) if self.user_vectors else self.index.vectors.shape[1]

    def members(self, user_id: str) -> list[str]:
        """Whose documents the user's retrieval searches: its cluster, or its top-N users by cos(z_u, z_v)."""
        if self.top_n > 0:
            users = list(self.user_vectors)
            sims = np.stack([self.user_vectors[v] for v in users]) @ self._vector(user_id)
            order = np.argsort(-sims, kind="stable")[: self.top_n]
            return list(dict.fromkeys([user_id, *(users[int(i)] for i in order)]))
        cluster = self.cluster_of.get(user_id)
        return list(self._members[cluster]) if cluster is not None else [user_id]

    def _vector(self, user_id: str) -> np.ndarray:
        """z_u (zeros for a user without an embedding: the user term then adds nothing)."""
        return np.asarray(self.user_vectors.get(user_id, np.zeros(self._dim())), dtype=np.float32)

    def retrieve(self, user_id: str, query_vector: np.ndarray, k: int) -> list[Retrieved]:
        """The k pool documents with the highest cos(q, d) + w · cos(z_u, z_author)."""
        return self.retrieve_many([user_id], np.atleast_2d(query_vector), k)[0]

    def retrieve_many(self, users: Sequence[str], queries: np.ndarray, k: int) -> list[list[Retrieved]]:
        """retrieve for each (user, query) pair, the queries of one cluster searched together."""
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        out: list[list[Retrieved]] = [[] for _ in users]
        groups: dict[object, list[int]] = {}
        for i, user in enumerate(users):
            clustered = self.top_n <= 0 and user in self.cluster_of
            groups.setdefault(("cluster", self.cluster_of[user]) if clustered else ("user", i), []).append(i)
        for (kind, _), positions in groups.items():
            viewer = users[positions[0]]
            if kind == "user":
                s, r = knn_rows(self.index.vectors, self.index.visible_rows(viewer, self.members(viewer)),
                                q[positions], SHORTLIST * k)  # fmt: skip
            else:
                s, r = self._cluster_shortlist(self.members(viewer), [users[i] for i in positions], q[positions], k)
            for j, i in enumerate(positions):
                out[i] = self._rerank(users[i], s[j], r[j], k)
        return out

    def _cluster_shortlist(
        self, members: list[str], viewers: list[str], q: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Query-only shortlists of the viewers of one cluster: its shareable rows (what every member sees of the
        others) searched once for all, merged with each non-sharing viewer's own rows (visible to it alone)."""
        s, r = knn_rows(self.index.vectors, self.index.visible_rows(None, members), q, SHORTLIST * k)
        for j, viewer in enumerate(viewers):
            if self.index.shares_all(viewer):
                continue
            own_s, own_r = knn_rows(self.index.vectors, self.index.visible_rows(viewer, [viewer]), q[j], SHORTLIST * k)
            ms, mr = merge_top_k([s[j : j + 1], own_s], [r[j : j + 1], own_r], SHORTLIST * k)
            if ms.shape[1] > s.shape[1]:
                pad = ms.shape[1] - s.shape[1]
                s = np.pad(s, ((0, 0), (0, pad)), constant_values=-np.inf)
                r = np.pad(r, ((0, 0), (0, pad)), constant_values=-1)
            s[j], r[j] = -np.inf, -1
            s[j, : ms.shape[1]], r[j, : ms.shape[1]] = ms[0], mr[0]
        return s, r

    def _rerank(self, user_id: str, scores: np.ndarray, rows: np.ndarray, k: int) -> list[Retrieved]:
        """The shortlist re-ranked by cos(q, d) + w · cos(z_u, z_author), top k (one per text)."""
        keep = rows >= 0
        candidates, scores = rows[keep], scores[keep]
        if len(candidates) == 0:
            return []
        user_term = self._z[self.index.owners.codes[candidates]] @ self._vector(user_id)
        combined = scores + self.user_weight * user_term
        order = np.argsort(-combined, kind="stable")
        return self.index.as_retrieved(candidates[order], combined[order], k)


def retrieve_all(retriever: CommunityRetriever, samples: Sequence[tuple[str, np.ndarray]], k: int) -> list:
    """Community-wide retrieval for (user_id, query vector) pairs, in order."""
    if not samples:
        return []
    return retriever.retrieve_many([u for u, _ in samples], np.stack([np.asarray(q) for _, q in samples]), k)
