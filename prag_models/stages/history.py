"""Stage functions of the dynamic users (docs/methods.md §3.7): drop-folder ingestion, the drift of a full
re-clustering, the clustering snapshot, the incremental update's summary, and what the history sensor reads.

The asset layer (``prag_assets/assets/history.py``, ``prag_assets/automation/sensors.py``) only opens the connection,
loops over the run's tasks and reports what these functions return.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from prag_models.config.settings import ALL_TASKS, Settings
from prag_models.data.history import (
    HISTORY_TABLE,
    IngestResult,
    append_history,
    archive_file,
    file_signature,
    has_table,
    inbox_dir,
    inbox_entries,
    parse_history_file,
)
from prag_models.data.tasks import LampDataError
from prag_models.storage.store import DuckDBBusyError, connect
from prag_models.users.incremental import STATE_TABLE, UpdateReport, clustering_drift, pending_history

DRIFT_TABLE = "cluster_drift"
DRIFT_DDL = (
    "task VARCHAR, run_id VARCHAR, computed_at TIMESTAMP, users_compared BIGINT, new_users BIGINT, "
    "removed_users BIGINT, clusters_before BIGINT, clusters_after BIGINT, changed_share DOUBLE, adjusted_rand DOUBLE"
)
#: The tables of other assets whose rows an incremental update rewrites for the changed users.
UPDATED_TABLES = ("profile_documents", "document_embeddings", "user_embeddings", "user_clusters")


def _now() -> datetime:
    """The current UTC time without a zone (DuckDB TIMESTAMP)."""
    return datetime.now(UTC).replace(tzinfo=None)


def reject(path: Path, error: str, log_error: Callable[[str], None]) -> None:
    """Move a drop-folder entry to rejected/ with its error beside it; a failed move is logged, never raised.

    The log line names the file and where its reason is, not the reason: a reason may quote the record's user, ids
    and values, and the log goes to Dagster's records, which `prag forget` does not edit (docs/privacy.md)."""
    error = error.encode("utf-8", "backslashreplace").decode("utf-8")
    try:
        target = archive_file(path, "rejected", error)
    except OSError as exc:
        log_error(f"rejected {path.name}, but could not move it to rejected/: {exc}")
        return
    log_error(f"rejected {path.name}: the reason is in {target.parent / target.name}.error.txt")


def ingest_inbox(
    con: duckdb.DuckDBPyConnection, home: Path, task: str, undated: str, log_error: Callable[[str], None]
) -> tuple[list[IngestResult], list[tuple[Path, str]]]:
    """Ingest each regular file of a task's drop folder on its own (one transaction per file); every failing or refused
    entry goes to rejected/ with the reason, and the others are still ingested. (ingest results, [(path, error)])."""
    files, refused = inbox_entries(home, task)
    bad: list[tuple[Path, str]] = list(refused)
    results = []
    for path in files:
        try:
            results.append(append_history(con, [parse_history_file(path, task, undated)]))
        except (duckdb.IOException, DuckDBBusyError):
            raise  # the DuckDB file, not this file, is the problem: the file stays for the next run
        except (LampDataError, OSError, ValueError, duckdb.Error) as exc:
            bad.append((path, str(exc) or type(exc).__name__))
            continue
        try:
            archive_file(path, "done")
        except OSError as exc:
            log_error(f"could not move {path} to done/: {exc} (a later run skips it: same batch id)")
    for path, error in bad:
        reject(path, error, log_error)
    return results, bad


def ingest_stats(
    con: duckdb.DuckDBPyConnection, home: Path, task: str, ingested: Sequence[IngestResult], rejected: int
) -> dict[str, Any]:
    """What one task's ingestion did and how large its history now is."""
    total, users = con.execute(
        f"SELECT count(*), count(DISTINCT user_id) FROM {HISTORY_TABLE} WHERE task = ?", [task]
    ).fetchall()[0]
    return {
        "files_ingested": sum(1 for r in ingested for _, _, n in r.batches if n),
        "rows_appended": sum(n for r in ingested for _, _, n in r.batches),
        "files_rejected": rejected,
        "new_users": len({u for r in ingested for u in r.new_users}),
        "history_rows": int(total),
        "history_users": int(users),
        "inbox": str(inbox_dir(home, task).relative_to(home)),  # under the home: no machine path in Dagster
    }


def latest_history(con: duckdb.DuckDBPyConnection, n: int = 5) -> pd.DataFrame:
    """The last ``n`` history rows (newest first) without their text (nor the fields it is rendered from)."""
    sql = f"SELECT * EXCLUDE (text, fields_json) FROM {HISTORY_TABLE} ORDER BY seq DESC LIMIT ?"
    return con.execute(sql, [n]).df()


def task_drift(con: duckdb.DuckDBPyConnection, task: str, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A task's new user_clusters against the clustering in effect before (cluster_state): (table row, summary)."""
    current = dict(con.execute("SELECT user_id, cluster FROM user_clusters WHERE task = ?", [task]).fetchall())
    previous = dict(con.execute(f"SELECT user_id, cluster FROM {STATE_TABLE} WHERE task = ?", [task]).fetchall())
    drift = clustering_drift(previous, current)
    summary = drift if previous else {**drift, "note": "no previous clustering"}
    return {"task": task, "run_id": run_id, "computed_at": _now(), **drift}, summary


def append_drift(con: duckdb.DuckDBPyConnection, rows: Iterable[Mapping[str, Any]]) -> int:
    """Append drift rows to cluster_drift (created when missing); returns how many."""
    frame = pd.DataFrame(list(rows))
    if frame.empty:
        return 0
    con.execute(f"CREATE TABLE IF NOT EXISTS {DRIFT_TABLE} ({DRIFT_DDL})")
    con.append(DRIFT_TABLE, frame, by_name=True)
    return len(frame)


def snapshot_clustering(con: duckdb.DuckDBPyConnection, task: str) -> int:
    """Replace a task's cluster_state by its user_embeddings + user_clusters in one transaction; returns the rows."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(f"DELETE FROM {STATE_TABLE} WHERE task = ?", [task])
        con.execute(
            f"INSERT INTO {STATE_TABLE} SELECT u.task, u.user_id, u.embedding, c.cluster, c.cluster, ?::TIMESTAMP "
            "FROM user_embeddings u JOIN user_clusters c USING (task, user_id) WHERE task = ? ORDER BY u.user_id",
            [_now(), task],
        )
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return int(con.execute(f"SELECT count(*) FROM {STATE_TABLE} WHERE task = ?", [task]).fetchall()[0][0])


def update_summary(report: UpdateReport) -> tuple[dict[str, Any], pd.DataFrame]:
    """An incremental update's per-task figures and its rows (one per updated user)."""
    frame = pd.DataFrame(report.users)
    placed = frame["new_cluster"].notna() if len(frame) else pd.Series(dtype=bool)
    moved = int(((frame["old_cluster"] != frame["new_cluster"]) & ~frame["is_new"] & placed).sum()) if len(frame) else 0
    stats = {
        "users_updated": len(frame),
        "new_users": int(frame["is_new"].sum()) if len(frame) else 0,
        "users_changing_cluster": moved,
        "unplaced_users": int((~placed).sum()),  # known only from documents others may not see (docs/privacy.md)
        "newly_embedded": report.newly_embedded,
        "reference": report.reference,
        "reference_agreement": report.reference_agreement,
    }
    return stats, frame


def is_clustered(con: duckdb.DuckDBPyConnection, task: str) -> bool:
    """Whether the task has a clustering to assign users to."""
    sql = "SELECT count(*) FROM user_clusters WHERE task = ?"
    return has_table(con, "user_clusters") and bool(con.execute(sql, [task]).fetchall()[0][0])


def pending_changes(
    con: duckdb.DuckDBPyConnection, tasks: Sequence[str], seen_seq: Mapping[str, int]
) -> tuple[dict[str, list[str]], dict[str, str], dict[str, int]]:
    """Users with history pending after each task's ``seen_seq``: (changed users, tasks waiting and why, new seqs).

    A task without a clustering keeps its seq (its history is noticed once the graph exists)."""
    changed: dict[str, list[str]] = {}
    waiting: dict[str, str] = {}
    seq = dict(seen_seq)
    if not has_table(con, HISTORY_TABLE):
        return changed, waiting, seq
    sql = f"SELECT task, max(seq) FROM {HISTORY_TABLE} GROUP BY task"
    latest = {t: int(n) for t, n in con.execute(sql).fetchall()}
    for task in tasks:
        pending = pending_history(con, task, since_seq=seen_seq.get(task, 0))
        if pending.empty:
            seq.update({task: latest[task]} if task in latest else {})
        elif not is_clustered(con, task):
            waiting[task] = "no user clusters yet (materialize the graph for this task)"
        else:
            changed[task] = sorted(pending["user_id"].unique())
            seq[task] = latest[task]
    return changed, waiting, seq


@dataclass
class HistoryCursor:
    """Sensor state: per task the last history seq handled, and drop-folder files already requested (size:mtime)."""

    seq: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: str | None) -> HistoryCursor:
        """Read a cursor string (None or empty = start)."""
        data = json.loads(raw) if raw else {}
        return cls({t: int(n) for t, n in data.get("seq", {}).items()}, dict(data.get("files", {})))

    def dump(self) -> str:
        """The cursor as a JSON string."""
        return json.dumps({"seq": self.seq, "files": self.files}, sort_keys=True)


@dataclass
class Changes:
    """What the sensor found: changed users and new files per task, and the cursor to store."""

    users: dict[str, list[str]]
    files: dict[str, list[str]]
    cursor: HistoryCursor
    waiting: dict[str, str] = field(default_factory=dict)  # task -> why its pending history cannot be applied yet
    refused: dict[str, list[str]] = field(default_factory=dict)  # task -> "<name>: <reason>" (the run rejects them)

    @property
    def tasks(self) -> list[str]:
        """Tasks with work for the incremental job."""
        return [t for t in ALL_TASKS if self.users.get(t) or self.files.get(t)]


def scan_changes(settings: Settings, cursor: HistoryCursor) -> Changes:
    """Pending history rows after the cursor and new drop-folder files, per configured task (DuckDB read-only)."""
    tasks = [t for t in ALL_TASKS if t in settings.data.tasks]
    seen, files, refused = {}, {}, {}
    for task in tasks:
        accepted, bad = inbox_entries(settings.home_path, task)  # symbolic links are listed, never followed
        refused[task] = [f"{path.name}: {reason}" for path, reason in bad]
        for path in accepted + [path for path, _ in bad]:
            try:
                name, sig = f"{task}/{path.name}", file_signature(path)
            except OSError:  # moved away meanwhile
                continue
            seen[name] = sig
            if cursor.files.get(name) != sig:
                files.setdefault(task, []).append(path.name)
    changed: dict[str, list[str]] = {}
    waiting: dict[str, str] = {}
    seq = dict(cursor.seq)
    if settings.duckdb_path.exists():
        with connect(settings.duckdb_path, read_only=True, timeout_s=2.0) as con:  # a tick never waits long
            changed, waiting, seq = pending_changes(con, tasks, cursor.seq)
    return Changes(changed, files, HistoryCursor(seq, seen), waiting, {t: r for t, r in refused.items() if r})
