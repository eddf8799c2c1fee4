"""Who may be shared (docs/privacy.md): each user's sharing consent and each document's visibility, as they come with
the data and as DuckDB holds them.

They come with the LaMP files in two ways (both optional; the side file wins where both speak):

* fields of the records: a question's ``"share": true|false`` (the consent of its user) and a profile document's
  ``"visibility": "shared"|"private"``;
* the side file ``sharing.json`` beside the ``LaMP_X[_time]`` folders::

      {"users": {"u0007": {"share": false}},
       "private_documents": ["d-901", {"user_id": "u0003", "id": "d-17"}]}

  ``private_documents`` lists a document id (private for every user that lists it) or one user's document.

A user without a stated consent gets ``privacy.default_share``. The tables: ``user_sharing(task, user_id, share,
source)`` with one row per user of the task (source ``record``, ``sharing.json`` or ``default``) and
``document_visibility(task, user_id, doc_id, visibility)`` with the documents whose visibility was stated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from prag_models.data.lamp_validation import VISIBILITIES, _read_json
from prag_models.data.tasks import LampDataError
from prag_models.storage.files import write_json_atomic

__all__ = ["VISIBILITIES", "SharingFile", "append_statements", "load_sharing_file", "parse_sharing", "sharing_frames"]
SHARING_FILE = "sharing.json"
SHARING_TABLE = "user_sharing"
VISIBILITY_TABLE = "document_visibility"
SHARING_COLUMNS = ["task", "user_id", "share", "source"]
VISIBILITY_COLUMNS = ["task", "user_id", "doc_id", "visibility"]


@dataclass(frozen=True)
class SharingFile:
    """The side file's content: consent per user, private document ids (any owner) and private (user, doc) pairs."""

    users: Mapping[str, bool] = field(default_factory=dict)
    private_ids: frozenset[str] = frozenset()
    private_pairs: frozenset[tuple[str, str]] = frozenset()

    def is_private(self, user_id: str, doc_id: str) -> bool:
        """Whether the side file makes this user's document private."""
        return doc_id in self.private_ids or (user_id, doc_id) in self.private_pairs


def _id(value: Any) -> str | None:
    """A JSON id as text (strings and ints), None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return value.strip() if isinstance(value, str) and value.strip() else None


def parse_sharing(data: Any, path: Path) -> SharingFile:
    """Validate the side file's JSON; LampDataError naming the file and the entry on any malformed part."""
    if not isinstance(data, dict):
        raise LampDataError(f"{path}: top level: must be an object with 'users' and/or 'private_documents'")
    unknown = set(data) - {"users", "private_documents"}
    if unknown:
        raise LampDataError(f"{path}: top level: unknown key(s) {sorted(unknown)}")
    users: dict[str, bool] = {}
    raw_users = data.get("users", {})
    if not isinstance(raw_users, dict):
        raise LampDataError(f"{path}: users: must be an object of user id -> {{\"share\": bool}}")
    for user, entry in raw_users.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("share"), bool):
            raise LampDataError(f"{path}: users['{user}']: field 'share': must be true or false")
        users[str(user)] = entry["share"]
    ids, pairs = set(), set()
    raw_docs = data.get("private_documents", [])
    if not isinstance(raw_docs, list):
        raise LampDataError(f"{path}: private_documents: must be a list")
    for i, entry in enumerate(raw_docs):
        if isinstance(entry, dict):
            user, doc = _id(entry.get("user_id")), _id(entry.get("id"))
            if user is None or doc is None:
                raise LampDataError(f"{path}: private_documents[{i}]: needs 'user_id' and 'id'")
            pairs.add((user, doc))
        elif (doc := _id(entry)) is not None:
            ids.add(doc)
        else:
            raise LampDataError(f"{path}: private_documents[{i}]: must be a document id or {{user_id, id}}")
    return SharingFile(users, frozenset(ids), frozenset(pairs))


def load_sharing_file(root: str | Path) -> SharingFile:
    """The side file ``root/sharing.json``, or an empty one when there is none."""
    path = Path(root) / SHARING_FILE
    return parse_sharing(_read_json(path), path) if path.is_file() else SharingFile()


def sharing_frames(
    task: str, samples: Iterable[Any], side: SharingFile, default_share: bool
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(user_sharing, document_visibility) rows of a task's samples (LampSample: user_id, share, profile).

    A user whose records state different consents is an error; a document listed private anywhere is private.
    """
    stated: dict[str, bool] = {}
    users: dict[str, None] = {}
    visibility: dict[tuple[str, str], str] = {}
    for s in samples:
        users.setdefault(s.user_id, None)
        share = getattr(s, "share", None)
        if share is not None:
            if stated.get(s.user_id, share) != share:
                raise LampDataError(f"{task}: user '{s.user_id}': field 'share': the records state both true and false")
            stated[s.user_id] = share
        for doc in s.profile:
            seen = getattr(doc, "visibility", None)
            if side.is_private(s.user_id, doc.doc_id):
                seen = "private"
            if seen is not None and visibility.get((s.user_id, doc.doc_id)) != "private":
                visibility[(s.user_id, doc.doc_id)] = seen
    rows = []
    for user in users:
        if user in side.users:
            rows.append((task, user, side.users[user], SHARING_FILE))
        elif user in stated:
            rows.append((task, user, stated[user], "record"))
        else:
            rows.append((task, user, default_share, "default"))
    text = "string"  # typed even when empty: the tables get VARCHAR columns
    sharing = pd.DataFrame(rows, columns=SHARING_COLUMNS).astype({"task": text, "user_id": text, "share": bool,
                                                                  "source": text})  # fmt: skip
    docs = pd.DataFrame([(task, u, d, v) for (u, d), v in visibility.items()], columns=VISIBILITY_COLUMNS)
    return sharing, docs.astype(text)


def task_sharing(settings: Any, task: str, splits: Mapping[str, Iterable[Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(user_sharing, document_visibility) rows of a task's loaded splits, with the source's sharing.json."""
    from prag_models.data.source import lamp_root

    side = load_sharing_file(lamp_root(settings))
    samples = [s for split in splits.values() for s in split]
    return sharing_frames(task, samples, side, settings.privacy.default_share)


STATEMENTS_TABLE = "sharing_statements"
STATEMENTS_DDL = (
    "task VARCHAR, user_id VARCHAR, doc_id VARCHAR, share BOOLEAN, visibility VARCHAR, stated_at TIMESTAMP, "
    "source VARCHAR"
)


def append_statements(con: Any, task: str, docs: Iterable[Any], stamp: Any, source: str) -> int:
    """Append the consents and visibilities stated by ingested records (``prag ingest``; HistoryDoc: user_id, doc_id,
    share, visibility) to sharing_statements; a later statement overrides the LaMP files' (docs/privacy.md). The
    consent stamp beside the file is raised first, so that no reader's snapshot without them is trusted."""
    rows = [(task, d.user_id, d.doc_id if d.visibility is not None else None, d.share, d.visibility, stamp, source)
            for d in docs if getattr(d, "share", None) is not None or getattr(d, "visibility", None) is not None]
    if not rows:
        return 0
    note_consent_change(con, stamp)
    con.execute(f"CREATE TABLE IF NOT EXISTS {STATEMENTS_TABLE} ({STATEMENTS_DDL})")
    con.executemany(f"INSERT INTO {STATEMENTS_TABLE} VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


#: Beside ``prag.duckdb``: the time of the newest consent or visibility statement written to it (``.consent``). A
#: reader of the published snapshot checks that the snapshot holds it (``privacy.rules.require_current_consent``).
CONSENT_STAMP_SUFFIX = ".consent"


def consent_stamp_path(db_path: str | Path) -> Path:
    """The consent stamp file of a DuckDB file (``prag.duckdb.consent``)."""
    p = Path(db_path)
    return p.with_name(p.name + CONSENT_STAMP_SUFFIX)


def database_path(con: Any) -> Path | None:
    """The file of a connection's current database (None for an in-memory one)."""
    row = next(iter(con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()")
                    .fetchall()), None)
    return Path(row[0]) if row and row[0] else None


def read_consent_stamp(db_path: str | Path) -> datetime | None:
    """The newest consent statement time recorded beside the file (None: no statement was ever ingested)."""
    path = consent_stamp_path(db_path)
    if not path.is_file():
        return None
    return datetime.fromisoformat(json.loads(path.read_text(encoding="utf-8"))["stated_at"])


def _write_stamp(db_path: Path, moment: datetime | None) -> None:
    """Replace the stamp atomically (None removes it)."""
    path = consent_stamp_path(db_path)
    if moment is None:
        path.unlink(missing_ok=True)
        return
    write_json_atomic(path, {"stated_at": moment.isoformat()})


def note_consent_change(con: Any, stamp: datetime) -> None:
    """Raise the consent stamp of the connection's file to ``stamp`` (before the statements commit: fail closed)."""
    path = database_path(con)
    if path is None:
        return
    current = read_consent_stamp(path)
    if current is None or stamp > current:
        _write_stamp(path, stamp)


def newest_statement(con: Any) -> datetime | None:
    """The time of the newest statement a database holds (None: none)."""
    if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND schema_name = 'main'",
                       [STATEMENTS_TABLE]).fetchall()[0][0]:  # fmt: skip
        return None
    return con.execute(f"SELECT max(stated_at) FROM {STATEMENTS_TABLE}").fetchall()[0][0]


def sync_consent_stamp(con: Any) -> None:
    """Set the stamp to the newest statement the file holds (a publisher holding the write lock; clears the claim
    of statements whose transaction rolled back)."""
    path = database_path(con)
    if path is not None and consent_stamp_path(path).exists():
        _write_stamp(path, newest_statement(con))
