"""The sharing rule (docs/privacy.md): which documents may leave their owner.

A document is *shareable* when its owner shares (``user_sharing.share``, ``privacy.default_share`` for a user the
table does not list) and it is not private (``document_visibility``). This module computes the flag per profile
document from DuckDB; ``ProfileIndex.visible_rows`` applies it to every read of other users' documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from prag_models.data.sharing import SHARING_TABLE, STATEMENTS_TABLE, VISIBILITY_TABLE
from prag_models.storage.store import table_exists


def user_consents(con, task: str) -> dict[str, bool]:
    """The stated or defaulted consent of every user the task's user_sharing table lists."""
    if not table_exists(con, SHARING_TABLE):
        return {}
    rows = con.execute(f"SELECT user_id, share FROM {SHARING_TABLE} WHERE task = ?", [task]).fetchall()
    return {str(u): bool(s) for u, s in rows} | {u: bool(s) for u, _, s in _statements(con, task, "share")}


def _statements(con, task: str, what: str) -> list[tuple[str, str | None, Any]]:
    """(user, doc, value) of the ingested statements about ``share`` or ``visibility``, oldest first."""
    if not table_exists(con, STATEMENTS_TABLE):
        return []
    sql = f"SELECT user_id, doc_id, {what} FROM {STATEMENTS_TABLE} WHERE task = ? AND {what} IS NOT NULL"
    return [(str(u), d, v) for u, d, v in con.execute(sql + " ORDER BY stated_at", [task]).fetchall()]


def private_documents(con, task: str) -> set[tuple[str, str]]:
    """(user_id, doc_id) of the task's documents whose owner made them private."""
    private: set[tuple[str, str]] = set()
    if table_exists(con, VISIBILITY_TABLE):
        sql = f"SELECT user_id, doc_id FROM {VISIBILITY_TABLE} WHERE task = ? AND visibility = 'private'"
        private = {(str(u), str(d)) for u, d in con.execute(sql, [task]).fetchall()}
    for user, doc, visibility in _statements(con, task, "visibility"):
        (private.add if visibility == "private" else private.discard)((user, str(doc)))
    return private


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


def unshareable_retrievals(con, task: str, frame: Any, default_share: bool) -> list[str]:
    """The data-quality rule of every retrieval table: no row shows a user another user's document that may not
    leave its owner (frame: user_id, source_user_id, doc_id, method, sample_id)."""
    others = frame[frame["source_user_id"] != frame["user_id"]]
    if others.empty:
        return []
    flags = shareable_flags(con, task, others["source_user_id"].tolist(), others["doc_id"].tolist(), default_share)
    bad = others[~flags]
    if bad.empty:
        return []
    shown = [f"{r.method}/{r.sample_id}: doc {r.doc_id} of {r.source_user_id}" for r in bad.head(3).itertuples()]
    return [f"{len(bad)} documents shown to another user without their owner's consent or private, e.g. {shown}"]
