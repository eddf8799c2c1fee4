"""New profile documents for existing or new users: file format, validation and the append-only history table.

File format (UTF-8 JSON, one task per file; the task comes from ``--task`` or from the drop folder's name)::

    [
      {"user_id": "u0007", "id": "d-901", "date": "2024-05-01",
       "description": "A heist that goes wrong ...", "tag": "twist ending"},
      ...
    ]

A top-level list of flat records: ``user_id`` and ``id`` (non-empty strings or ints), an optional ``date`` (string or
int in an accepted format, as in LaMP profiles; ``data.undated = "keep"`` keeps an unparseable one undated) and every
profile field of the task with the LaMP rules (docs/methods.md §1; ids and texts encodable, no NUL): LaMP-1 title,
abstract · LaMP-2 description, tag · LaMP-3 text, score (a number is accepted for the score) · LaMP-4 title, text ·
LaMP-5 title, abstract · LaMP-7 text. Other keys are ignored, as in LaMP profiles. A record whose rendered text is
blank, or a (user_id, id) pair listed twice in a file, is rejected. A document id a user already has replaces that
document (an edit); any other id adds a document; an unknown user id creates a new user.

Errors are ``LampDataError``s of the form ``<file>: record #<i> (user '<u>', id '<d>'): field '<name>': <problem>``;
a file (or a set of files) is validated completely before anything is written.

The drop folder ``<home>/inbox/<task>/`` takes regular ``*.json`` files only: a symbolic link, or an entry that
resolves outside the folder, is refused (never read or followed) and moved to ``rejected/`` like an invalid file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from prag_models.data.lamp_validation import (
    PROFILE_LABELS,
    VISIBILITIES,
    _as_id,
    _fail,
    _field_text,
    _read_json,
    _text,
    check_date,
    text_problem,
)
from prag_models.data.sharing import append_statements
from prag_models.data.tasks import PROFILE_FIELDS, RENDER_FIELDS, LampDataError, render_document, task_from_name
from prag_models.storage.hashing import content_hash
from prag_models.storage.store import transaction

HISTORY_TABLE = "profile_history"
HISTORY_COLUMNS = (
    "seq BIGINT, batch_id VARCHAR, ingested_at TIMESTAMP, source VARCHAR, task VARCHAR, user_id VARCHAR, "
    "doc_id VARCHAR, date VARCHAR, text VARCHAR, fields_json VARCHAR, content_hash VARCHAR"
)
INBOX = "inbox"


def has_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether a table exists (fetches the whole result: DuckDB 2 refuses register() after an unfinished one)."""
    sql = "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = 'main'"
    return bool(con.execute(sql, [table]).fetchall()[0][0])


@dataclass(frozen=True)
class HistoryDoc:
    """One validated new profile document."""

    user_id: str
    doc_id: str
    date: str | None
    fields: dict[str, str]
    text: str
    content_hash: str
    share: bool | None = None  # the user's sharing consent, when the record states it (docs/privacy.md)
    visibility: str | None = None  # "shared" | "private", when the record states it


@dataclass(frozen=True)
class HistoryBatch:
    """One validated file: its task, batch id (task + content hash of the file) and documents."""

    source: str
    task: str
    batch_id: str
    docs: tuple[HistoryDoc, ...]


@dataclass(frozen=True)
class IngestResult:
    """What one ingestion wrote: per batch, the rows appended (0 when the same file was ingested before)."""

    batches: tuple[tuple[str, str, int], ...]  # (source, batch_id, rows appended)
    users: tuple[str, ...]  # users with new rows
    new_users: tuple[str, ...]  # of those, users the task had no documents for


def _where(index: int, record: Any) -> str:
    """How an error message names a record: index plus user and id when they are usable."""
    if not isinstance(record, dict):
        return f"record #{index}"
    named = [(key, _as_id(record.get(name))) for key, name in (("user", "user_id"), ("id", "id"))]
    known = [f"{key} '{value}'" for key, value in named if value is not None and text_problem(value) is None]
    return f"record #{index}" + (f" ({', '.join(known)})" if known else "")


def parse_history_records(data: Any, path: Path, task: str, undated: str = "error") -> tuple[HistoryDoc, ...]:
    """Validate decoded JSON against the format above; LampDataError naming file, record and field."""
    if not isinstance(data, list):
        raise _fail(path, "top level", "<root>", f"must be a list of documents, got {type(data).__name__}")
    if not data:
        raise _fail(path, "top level", "<root>", "is an empty list (nothing to ingest)")
    out: list[HistoryDoc] = []
    seen: set[tuple[str, str]] = set()
    for i, record in enumerate(data):
        where = _where(i, record)
        if not isinstance(record, dict):
            raise _fail(path, where, "<record>", f"must be an object, got {type(record).__name__}")
        ids = {}
        for name in ("user_id", "id"):
            value = _as_id(record.get(name))
            if value is None:
                problem = (
                    "is missing" if name not in record else f"must be a non-empty string or int, got {record[name]!r}"
                )
                raise _fail(path, where, name, problem)
            ids[name] = _text(path, where, name, value)
        key = (ids["user_id"], ids["id"])
        if key in seen:
            raise _fail(path, where, "id", f"duplicate document id '{key[1]}' for user '{key[0]}' in this file")
        seen.add(key)
        fields: dict[str, str] = {}
        for name in PROFILE_FIELDS[task]:
            if name not in record:
                raise _fail(path, where, name, f"missing {task} field")
            value = _field_text(task, name, record[name])
            if value is None:
                raise _fail(path, where, name, f"wrong type {type(record[name]).__name__}")
            allowed = PROFILE_LABELS.get((task, name))
            if allowed is not None and value.strip() not in allowed:
                raise _fail(path, where, name, f"{value!r} is not a {task} label {list(allowed)}")
            fields[name] = _text(path, where, name, value)
        date_text = check_date(path, where, "date", record.get("date"), undated)
        text = render_document(task, fields)
        if not any(fields[n].strip() for n in RENDER_FIELDS[task]):
            raise _fail(path, where, "/".join(RENDER_FIELDS[task]), "is blank (the document would have no text)")
        share, visibility = record.get("share"), record.get("visibility")
        if (share is not None and not isinstance(share, bool)) or visibility not in (None, *VISIBILITIES):
            bad = "share" if share is not None and not isinstance(share, bool) else "visibility"
            raise _fail(path, where, bad, f"{record[bad]!r} is not allowed (share: true|false; visibility: "
                                          f"{' | '.join(VISIBILITIES)})")  # fmt: skip
        out.append(HistoryDoc(ids["user_id"], ids["id"], date_text, fields, text, content_hash(text), share,
                              visibility))  # fmt: skip
    return tuple(out)


def parse_history_file(path: str | Path, task: str, undated: str = "error") -> HistoryBatch:
    """Read and validate one history file for a task (canonical or LaMP_X spelling)."""
    p = Path(path)
    try:
        task = task_from_name(task)
    except LampDataError as exc:
        raise LampDataError(f"{p}: {exc}") from None
    docs = parse_history_records(_read_json(p), p, task, undated)
    digest = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return HistoryBatch(str(p), task, f"{task}-{digest}", docs)


def ensure_history_table(con: duckdb.DuckDBPyConnection) -> None:
    """Create the append-only history table if it does not exist."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {HISTORY_TABLE} ({HISTORY_COLUMNS})")


def _known_users(con: duckdb.DuckDBPyConnection, task: str) -> set[str]:
    """Users the task already has documents for (profile documents or earlier history)."""
    users = {
        u for (u,) in con.execute(f"SELECT DISTINCT user_id FROM {HISTORY_TABLE} WHERE task = ?", [task]).fetchall()
    }
    if has_table(con, "profile_documents"):
        sql = "SELECT DISTINCT user_id FROM profile_documents WHERE task = ?"
        users |= {u for (u,) in con.execute(sql, [task]).fetchall()}
    return users


def append_history(
    con: duckdb.DuckDBPyConnection, batches: Sequence[HistoryBatch], now: datetime | None = None
) -> IngestResult:
    """Append validated batches in one transaction; a batch id already in the table is skipped (same file again)."""
    ensure_history_table(con)
    stamp = (now or datetime.now(UTC)).replace(tzinfo=None)
    done = {b for (b,) in con.execute(f"SELECT DISTINCT batch_id FROM {HISTORY_TABLE}").fetchall()}
    report: list[tuple[str, str, int]] = []
    users: dict[str, None] = {}
    new_users: dict[str, None] = {}
    with transaction(con):
        seq = con.execute(f"SELECT coalesce(max(seq), 0) FROM {HISTORY_TABLE}").fetchall()[0][0]
        for batch in batches:
            if batch.batch_id in done:
                report.append((batch.source, batch.batch_id, 0))
                continue
            known = _known_users(con, batch.task)
            rows = []
            for doc in batch.docs:
                seq += 1
                rows.append(
                    (
                        seq,
                        batch.batch_id,
                        stamp,
                        batch.source,
                        batch.task,
                        doc.user_id,
                        doc.doc_id,
                        doc.date,
                        doc.text,
                        json.dumps(doc.fields, ensure_ascii=False, sort_keys=True),
                        doc.content_hash,
                    )
                )
                users.setdefault(doc.user_id)
                if doc.user_id not in known:
                    new_users.setdefault(doc.user_id)
            frame = pd.DataFrame(rows, columns=[c.split()[0] for c in HISTORY_COLUMNS.split(", ")])
            con.register("_prag_history", frame)
            try:
                con.execute(f"INSERT INTO {HISTORY_TABLE} SELECT * FROM _prag_history")
            finally:
                con.unregister("_prag_history")
            append_statements(con, batch.task, batch.docs, stamp, batch.source)  # docs/privacy.md
            done.add(batch.batch_id)
            report.append((batch.source, batch.batch_id, len(rows)))
    return IngestResult(tuple(report), tuple(users), tuple(new_users))


def ingest_files(
    con: duckdb.DuckDBPyConnection, paths: Iterable[str | Path], task: str, undated: str = "error"
) -> IngestResult:
    """Validate every file first (nothing is written if one is bad), then append them as one batch each."""
    batches = [parse_history_file(p, task, undated) for p in paths]
    return append_history(con, batches)


def inbox_dir(home: str | Path, task: str) -> Path:
    """The drop folder of a task: ``<home>/inbox/<task>/``."""
    return Path(home) / INBOX / task_from_name(task)


def inbox_entries(home: str | Path, task: str) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The drop folder's ``*.json`` entries: regular files to ingest, oldest first (name order on ties), and the
    refused ones with the reason (symbolic links and entries resolving outside the folder are never followed)."""
    folder = inbox_dir(home, task)
    if not folder.is_dir():
        return [], []
    real = folder.resolve()
    files: list[tuple[int, str, Path]] = []
    refused: list[tuple[Path, str]] = []
    for p in sorted(folder.glob("*.json")):
        try:
            st = p.lstat()
            if p.is_symlink():
                refused.append((p, f"refused: a symbolic link (to {os.readlink(p)}), never followed"))
            elif p.resolve().parent != real:
                refused.append((p, f"refused: resolves outside the drop folder {folder}"))
            elif p.is_file():
                files.append((st.st_mtime_ns, p.name, p))
        except OSError:  # gone meanwhile (moved by a run): nothing to do
            continue
    return [p for _, _, p in sorted(files)], refused


def inbox_files(home: str | Path, task: str) -> list[Path]:
    """The regular JSON files waiting in a task's drop folder, oldest first (symbolic links are not listed)."""
    return inbox_entries(home, task)[0]


def file_signature(path: Path) -> str:
    """Size and modification time of a file (of a link itself, never its target): a changed file is a new one."""
    stat = path.lstat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def archive_file(path: Path, outcome: str, note: str = "") -> Path:
    """Move a drop-folder file to ``done/`` or ``rejected/`` beside it (with ``<name>.error.txt`` for a note)."""
    folder = path.parent / outcome
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    target = folder / f"{stamp}_{path.name}"
    if path.is_symlink():
        os.rename(path, target)  # moves the link itself, never what it points to
    else:
        shutil.move(str(path), target)
    if note:
        target.with_name(target.name + ".error.txt").write_text(
            note + "\n", encoding="utf-8", errors="backslashreplace"
        )
    return target
