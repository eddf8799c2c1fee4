"""The sharing rule (docs/privacy.md): which documents may leave their owner.

A document is *shareable* when its owner shares (``user_sharing.share``, ``privacy.default_share`` for a user the
table does not list) and it is not private (``document_visibility``). This module computes the flag per profile
document from DuckDB; ``ProfileIndex.visible_rows`` applies it to every read of other users' documents.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prag_models.data.sharing import SHARING_TABLE, VISIBILITY_TABLE
from prag_models.store import table_exists


def user_consents(con, task: str) -> dict[str, bool]:
    """The stated or defaulted consent of every user the task's user_sharing table lists."""
    if not table_exists(con, SHARING_TABLE):
        return {}
    rows = con.execute(f"SELECT user_id, share FROM {SHARING_TABLE} WHERE task = ?", [task]).fetchall()
    return {str(u): bool(s) for u, s in rows}


def private_documents(con, task: str) -> set[tuple[str, str]]:
    """(user_id, doc_id) of the task's documents whose owner made them private."""
    if not table_exists(con, VISIBILITY_TABLE):
        return set()
    sql = f"SELECT user_id, doc_id FROM {VISIBILITY_TABLE} WHERE task = ? AND visibility = 'private'"
    return {(str(u), str(d)) for u, d in con.execute(sql, [task]).fetchall()}


def shareable_flags(
    con, task: str, user_ids: Sequence[str], doc_ids: Sequence[str], default_share: bool
) -> np.ndarray:
    """Per document (owner, id): may it be shown to another user (owner shares and the document is not private)."""
    consent = user_consents(con, task)
    private = private_documents(con, task)
    return np.asarray(
        [consent.get(u, default_share) and (u, d) not in private for u, d in zip(user_ids, doc_ids, strict=True)],
        dtype=bool,
    )


def opted_out_users(users: Sequence[str], share: float, seed: int) -> set[str]:
    """A seeded ``share`` of the users (rounded) who withdraw consent: the consent-cost evaluation's scenario."""
    ordered = sorted(set(users))
    n = int(round(share * len(ordered)))
    if n <= 0:
        return set()
    chosen = np.random.default_rng(seed).choice(len(ordered), size=n, replace=False)
    return {ordered[int(i)] for i in chosen}
