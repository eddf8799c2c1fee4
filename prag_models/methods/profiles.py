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
    """Documents of all users of a task; rows of a user are kept in profile (date) order.

    ``shareable[row]`` says whether a document may be shown to users other than its owner (docs/privacy.md: its
    owner shares and it is not private; ``prag_models.privacy.shareable_flags``). An index built without the flags
    shares nothing. Every read of rows goes through ``visible_rows``: a viewer sees its own documents and the
    shareable documents of the others — there is no other way to a user's rows.
    """

    doc_ids: list[str]
    user_ids: list[str]
    texts: list[str]
    vectors: np.ndarray  # (n_docs, d), unit rows
    shareable: np.ndarray | None = None  # (n_docs,) bool; None = nothing leaves its owner
    _rows_by_user: dict[str, np.ndarray] = field(init=False, repr=False)
    _shared_by_user: dict[str, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        by_user: dict[str, list[int]] = {}
        for row, user in enumerate(self.user_ids):
            by_user.setdefault(user, []).append(row)
        self._rows_by_user = {u: np.asarray(r, dtype=np.int64) for u, r in by_user.items()}
        flags = np.zeros(len(self.user_ids), dtype=bool) if self.shareable is None else np.asarray(self.shareable)
        if flags.shape != (len(self.user_ids),):
            raise ValueError(f"shareable has shape {flags.shape}, expected ({len(self.user_ids)},)")
        self.shareable = flags.astype(bool)
        self._shared_by_user = {u: r[self.shareable[r]] for u, r in self._rows_by_user.items()}

    def visible_rows(self, viewer: str, owners: Sequence[str] | None = None) -> np.ndarray:
        """Rows of the owners' documents the viewer may see, owner by owner in the given order (None = every user in
        index order): all of the viewer's own rows, only the shareable rows of anyone else."""
        owners = list(self._rows_by_user) if owners is None else owners
        parts = [
            (self._rows_by_user if u == viewer else self._shared_by_user)[u]
            for u in dict.fromkeys(owners)
            if u in self._rows_by_user
        ]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def shares_all(self, user_id: str) -> bool:
        """Whether every document of the user is shareable (then it sees exactly what the others see of it)."""
        rows = self._rows_by_user.get(user_id)
        return rows is None or len(self._shared_by_user[user_id]) == len(rows)

    def with_shareable(self, shareable: np.ndarray) -> ProfileIndex:
        """The same documents under other sharing flags (the consent-cost evaluation)."""
        return ProfileIndex(self.doc_ids, self.user_ids, self.texts, self.vectors, shareable)

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
