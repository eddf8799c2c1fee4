"""The profile documents a task holds: the LaMP files' documents and the latest version of each history document
(docs/methods.md §3.7), merged by one rule wherever they meet.

``profile_documents`` (the full stage) and the incremental update (``users/incremental.py``) both place a history
document by :func:`merge_documents` — by date into the user's existing order, an id it already has replaced — so a
full run over LaMP ∪ history builds the rows the incremental update writes. A history document is *included* once
its latest version (by ``seq``) is in ``profile_documents`` with the same content hash; the incremental update treats
every other one as pending (``users.incremental.pending_history``), so what a full run included is never applied
again. Who may see a history document is not a column here: the sharing rule reads the consents and visibilities
its records stated (``sharing_statements``, ``privacy/rules.py``), whichever path wrote the row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from prag_models.data.history import HISTORY_TABLE, has_table
from prag_models.data.lamp import parse_date

#: The columns of table profile_documents, in order.
DOC_COLUMNS = ["task", "user_id", "doc_id", "date", "position", "text", "fields_json", "content_hash"]
#: The columns of a history row that become a document's.
HISTORY_DOC_COLUMNS = ["seq", "user_id", "doc_id", "date", "text", "fields_json", "content_hash"]

#: The latest version (highest seq) of each (user, document) of a task's history.
LATEST_SQL = (
    f"SELECT * FROM {HISTORY_TABLE} WHERE task = ? "
    "QUALIFY row_number() OVER (PARTITION BY user_id, doc_id ORDER BY seq DESC) = 1"
)


def latest_history(con: duckdb.DuckDBPyConnection, task: str) -> pd.DataFrame:
    """The latest version of every history document of a task, in seq order (empty without a history table)."""
    if not has_table(con, HISTORY_TABLE):
        return pd.DataFrame(columns=HISTORY_DOC_COLUMNS)
    return con.execute(f"SELECT {', '.join(HISTORY_DOC_COLUMNS)} FROM ({LATEST_SQL}) ORDER BY seq", [task]).df()


def merge_documents(existing: pd.DataFrame, incoming: pd.DataFrame) -> pd.DataFrame:
    """One user's documents after new ones arrive: inserted by date into the existing order, ids replaced.

    A dated new document goes before the first kept document that is later or undated; undated ones go last.
    """
    kept = existing[~existing["doc_id"].isin(set(incoming["doc_id"]))].reset_index(drop=True)
    kept_dates = [parse_date(d) for d in kept["date"]]
    keys: list[tuple] = [(i, 1, (0, datetime.min, i)) for i in range(len(kept))]
    for r, value in enumerate(incoming["date"]):
        date = parse_date(value)
        slot = len(kept)
        if date is not None:
            slot = next((i for i, d in enumerate(kept_dates) if d is None or d > date), len(kept))
        keys.append((slot, 0, (date is None, date or datetime.min, r)))
    merged = pd.concat([kept, incoming.reset_index(drop=True)], ignore_index=True)
    order = sorted(range(len(merged)), key=lambda i: keys[i])
    merged = merged.iloc[order].reset_index(drop=True)
    merged["position"] = np.arange(len(merged), dtype=np.int64)
    return merged


def pending_sql(held: str) -> str:
    """The one rule of what is pending, as SQL over a history row ``l``: its (user, id, content hash) is not among the
    documents ``held`` (a table or a parenthesised query with those columns). The full run and the incremental
    update both ask it (:func:`not_included`, ``users.incremental.pending_history``)."""
    return (f"NOT EXISTS (SELECT 1 FROM {held} p WHERE p.user_id = l.user_id AND p.doc_id = l.doc_id "
            "AND p.content_hash = l.content_hash)")  # fmt: skip


def not_included(documents: pd.DataFrame, latest: pd.DataFrame) -> pd.DataFrame:
    """The history rows whose (user, id, content hash) the documents do not hold yet (the pending ones)."""
    if latest.empty or documents.empty:
        return latest
    keys = ["user_id", "doc_id", "content_hash"]
    with duckdb.connect() as con:
        con.register("held", documents[keys].astype(str))
        con.register("l", latest[keys].astype(str).assign(row=np.arange(len(latest))))
        rows = con.execute(f"SELECT row FROM l WHERE {pending_sql('held')} ORDER BY row").fetchnumpy()["row"]
    return latest.iloc[rows]


def with_history(task: str, documents: pd.DataFrame, latest: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A task's LaMP documents (``profile_documents`` columns) with the latest history versions merged in, and what
    was included: only the history's users are re-ordered (:func:`merge_documents`, in seq order); a version the
    documents already hold is no change. Stats: history documents included, users, new users, the last seq."""
    incoming = not_included(documents, latest)
    stats = {"history_documents": len(incoming), "history_users": int(incoming["user_id"].nunique()),
             "history_new_users": len(set(incoming["user_id"]) - set(documents["user_id"])),
             "history_seq": int(latest["seq"].max()) if len(latest) else 0}  # fmt: skip
    if incoming.empty:
        return documents[DOC_COLUMNS].reset_index(drop=True), stats
    users = sorted(set(incoming["user_id"]))
    changed = documents["user_id"].isin(users)
    by_user = dict(tuple(documents[changed].groupby("user_id", sort=False)))
    empty = documents.iloc[0:0]
    parts = [merge_documents(by_user.get(u, empty), incoming[incoming["user_id"] == u]).assign(user_id=u, task=task)
             for u in users]  # fmt: skip
    merged = pd.concat([documents[~changed], *parts], ignore_index=True)[DOC_COLUMNS]
    merged = merged.sort_values(["user_id", "position"], kind="stable").reset_index(drop=True)
    return merged.astype({"position": "int64"}), stats
