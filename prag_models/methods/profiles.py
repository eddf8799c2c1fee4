"""An in-memory view of one task's profile documents: texts, vectors and each user's rows in date order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Retrieved:
    """One retrieved document: its row in the profile index, the user it came from and its score."""

    row: int
    doc_id: str
    source_user_id: str
    score: float


@dataclass
class ProfileIndex:
    """Documents of all users of a task; rows of a user are kept in profile (date) order."""

    doc_ids: list[str]
    user_ids: list[str]
    texts: list[str]
    vectors: np.ndarray  # (n_docs, d), unit rows
    rows_by_user: dict[str, np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        by_user: dict[str, list[int]] = {}
        for row, user in enumerate(self.user_ids):
            by_user.setdefault(user, []).append(row)
        self.rows_by_user = {u: np.asarray(r, dtype=np.int64) for u, r in by_user.items()}

    def rows_of(self, users: Sequence[str]) -> np.ndarray:
        """Rows of the given users' documents (own profile first when the asking user is listed first)."""
        parts = [self.rows_by_user[u] for u in users if u in self.rows_by_user]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def as_retrieved(self, rows: Sequence[int], scores: Sequence[float]) -> list[Retrieved]:
        """Wrap rows and scores into Retrieved records."""
        return [
            Retrieved(int(r), self.doc_ids[int(r)], self.user_ids[int(r)], float(s))
            for r, s in zip(rows, scores, strict=True)
        ]


def top_by_cosine(index: ProfileIndex, rows: np.ndarray, query_vector: np.ndarray, k: int) -> list[Retrieved]:
    """The k rows most similar to the query vector (ties keep profile order)."""
    if len(rows) == 0:
        return []
    scores = index.vectors[rows] @ np.asarray(query_vector, dtype=np.float32)
    order = np.argsort(-scores, kind="stable")[:k]
    return index.as_retrieved(rows[order], scores[order])
