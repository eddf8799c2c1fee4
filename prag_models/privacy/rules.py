"""The sharing rule (docs/privacy.md): which documents may leave their owner.

A document is *shareable* when its owner shares (``user_sharing.share``, then the ingested ``sharing_statements``,
``privacy.default_share`` for a user neither lists) and it is not private (``document_visibility``, then the
statements). :func:`shareable_mask` is the one function that decides it, for the graph (``methods.task_tables``),
``prag answer`` and the served pyfunc (``mlops.serving.read_task_index``) alike; a viewer sees its own documents
and the shareable documents of the others (``ProfileIndex.visible_rows`` applies it to every read). Only shareable
documents shape what other users get: user embeddings, clusters, neighbours and the CFRAG user encoder's document
table are built from them alone (:func:`shaping_mask`, docs/privacy.md); every artefact other users' results depend
on reads the shared view of ``prag_models.privacy.shareable``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prag_models.data.sharing import (
    SHARING_TABLE,
    STATEMENTS_TABLE,
    VISIBILITY_TABLE,
    newest_statement,
    read_consent_stamp,
    sync_consent_stamp,
)
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


def sharing_rule(con, task: str, default_share: bool) -> Callable[[Any, Any], np.ndarray]:
    """The sharing decision of a task read once (consents and private documents), as a function of (owners, doc ids)
    → shareable mask (:func:`shareable_mask`); for callers that stream documents in batches."""
    import pyarrow as pa
    import pyarrow.compute as pc

    consent = user_consents(con, task)
    stated_set = pa.array(list(consent), pa.string())
    shared_set = pa.array([u for u, s in consent.items() if s], pa.string())
    private = private_documents(con, task)
    private_set = pa.array([f"{u}\x1f{d}" for u, d in private], pa.string())

    def mask(user_ids: Any, doc_ids: Any) -> np.ndarray:
        users = user_ids if isinstance(user_ids, pa.Array | pa.ChunkedArray) else pa.array(user_ids, pa.string())
        docs = doc_ids if isinstance(doc_ids, pa.Array | pa.ChunkedArray) else pa.array(doc_ids, pa.string())
        if len(users) != len(docs):
            raise ValueError(f"{len(users)} owners for {len(docs)} documents")
        if len(users) == 0:
            return np.zeros(0, dtype=bool)
        stated = pc.is_in(users, value_set=stated_set).to_numpy(zero_copy_only=False)
        flags = np.where(stated, pc.is_in(users, value_set=shared_set).to_numpy(zero_copy_only=False),
                         bool(default_share))  # fmt: skip
        if private:
            joined = pc.binary_join_element_wise(pc.cast(users, pa.string()), pc.cast(docs, pa.string()), "\x1f")
            flags &= ~pc.is_in(joined, value_set=private_set).to_numpy(zero_copy_only=False)
        return np.asarray(flags, dtype=bool)

    return mask


def shareable_mask(con, task: str, user_ids: Any, doc_ids: Any, default_share: bool) -> np.ndarray:
    """THE sharing decision: per document (owner, id), may it be shown to another user — its owner shares (stated,
    else ``default_share``) and it is not private. Ids as sequences or Arrow arrays; no Python object per row."""
    return sharing_rule(con, task, default_share)(user_ids, doc_ids)


def shareable_flags(
    con, task: str, user_ids: Sequence[str], doc_ids: Sequence[str], default_share: bool
) -> np.ndarray:
    """Per document (owner, id): may it be shown to another user (:func:`shareable_mask`)."""
    return shareable_mask(con, task, list(user_ids), [str(d) for d in doc_ids], default_share)


#: What may shape other users' results (user embeddings, clusters, neighbours, the CFRAG encoder's document table):
#: the same documents that may be shown to them (docs/privacy.md).
shaping_mask = shareable_mask


def opted_out_users(users: Sequence[str], share: float, seed: int) -> set[str]:
    """A seeded ``share`` of the users (rounded) who withdraw consent: the consent-cost evaluation's scenario."""
    ordered = sorted(set(users))
    n = int(round(share * len(ordered)))
    if n <= 0:
        return set()
    chosen = np.random.default_rng(seed).choice(len(ordered), size=n, replace=False)
    return {ordered[int(i)] for i in chosen}


def consent_cost_opted_out(con, task: str, share: float, seed: int) -> list[str]:
    """The users a task's consent-cost rows opt out (:func:`opted_out_users` over the users with indexed documents,
    the users ``ProfileIndex.users`` lists), sorted; none when ``share`` is 0."""
    if share <= 0:
        return []
    users = [u for (u,) in con.execute(
        "SELECT DISTINCT p.user_id FROM profile_documents p JOIN document_embeddings e USING (task, user_id, doc_id) "
        "WHERE task = ?", [task]).fetchall()]  # fmt: skip
    return sorted(opted_out_users(users, share, seed))


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


class StaleConsentError(LookupError):
    """The readers' snapshot predates a consent or visibility statement: serving it could show withdrawn documents."""


def require_current_consent(con, live_path: str | Path, source: str) -> None:
    """Refuse a snapshot that lacks the newest consent statement written to the live file (the stamp beside it);
    the live file itself always holds every committed statement. ``source``: ``read_connection``'s "live" | ..."""
    if source == "live":
        return
    stamp = read_consent_stamp(live_path)
    held = newest_statement(con)
    if stamp is not None and (held is None or held < stamp):
        raise StaleConsentError(
            f"the readers' snapshot ({source}) predates the consent statement of {stamp.isoformat()} in {live_path} "
            f"(newest it holds: {held.isoformat() if held else 'none'}) and a writer holds the live file: refusing "
            "to serve documents whose consent may be withdrawn; retry when the run ends (or `prag ingest` again)"
        )


def publish_readers_snapshot(path: str | Path, con=None) -> Path:  # noqa: ANN001
    """Publish the readers' snapshot with the consent stamp set to the newest statement it holds (``con``: the
    caller's read-write connection; the write lock makes the stamp and the copy agree)."""
    from prag_models.storage.store import connect, publish_snapshot

    if con is None:
        with connect(path) as own:
            sync_consent_stamp(own)
            return publish_snapshot(path, own)
    sync_consent_stamp(con)
    return publish_snapshot(path, con)


def publish_if_consent_changed(con, before: Any) -> Path | None:  # noqa: ANN001
    """After writes that may have appended consent statements (``before``: ``newest_statement`` until then): republish
    the readers' snapshot in this connection when a statement was added and a snapshot exists (else None)."""
    from prag_models.data.sharing import database_path
    from prag_models.storage.store import snapshot_path

    path = database_path(con)
    if path is None or newest_statement(con) == before or not snapshot_path(path).exists():
        return None
    return publish_readers_snapshot(path, con)
