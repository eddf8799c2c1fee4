"""`prag forget` on Dagster's records (docs/privacy.md): the runs of the home's instance that name the user go.

A run that works records no user text or id (metadata holds counts); a failure may: a run stopped by a malformed
LaMP record names the file, the record's id and field and may quote the value, and a failed check may name example
ids. So every run that recorded a problem (failed or canceled, or any record at level WARNING or above: a failed
check logs one) is searched — every string of its event records and of the run itself, its compute logs and the log
file of the `prag` command that launched it — for the user's ids (``prag_models.privacy.forget.user_ids``), each a
whole word; a run that names one is deleted with Dagster's own API (``DagsterInstance.delete_run``: the run and its
events), with the check executions Dagster keeps beside them, its compute logs and its launcher's log. A launcher log
whose run Dagster never recorded is searched the same way. Runs still going are left (and counted): forget again
when they end. Then each sqlite file of the instance is vacuumed and its WAL truncated, so that the deleted rows'
bytes leave the files' free pages too. Call it under the home's lock (``prag forget`` does), with no Dagster process
holding the files in a transaction.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from prag_models.config.settings import PROJECT_ROOT, Settings

#: Run statuses of runs still going (not deleted: their records are still being written).
GOING = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
#: The run tag of the token a `prag` command launched the run with (its log file ends with the token's head).
LAUNCH_TAG = "prag/launch"


def id_pattern(ids: Iterable[str]) -> re.Pattern[str]:
    """A pattern that finds any of the ids as a whole word (not inside a longer id or number)."""
    alternatives = "|".join(re.escape(i) for i in sorted({i for i in ids if i}, key=len, reverse=True))
    if not alternatives:  # an empty alternative would match everywhere
        raise ValueError("no id to search for")
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")


def _strings(value: Any) -> Iterator[str]:
    """Every string (keys included) of a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _names(pattern: re.Pattern[str], serialized: str) -> bool:
    """Whether a serialized Dagster object names an id in one of its strings (decoded: no JSON escape in the way)."""
    return any(pattern.search(s) for s in _strings(json.loads(serialized)))


def _file_names(pattern: re.Pattern[str], path: Path) -> bool:
    """Whether a log file names an id."""
    return bool(pattern.search(path.read_bytes().decode("utf-8", "replace")))


def _launcher_logs(logs: Path, token: str | None) -> list[Path]:
    """The log files of the `prag` command that launched a run (materialize, ingest, lifecycle: ``*-<token[:6]>``)."""
    return sorted(p for p in logs.glob(f"*-{token[:6]}.log") if p.is_file()) if token else []


def _run_names(instance: Any, record: Any, pattern: re.Pattern[str], logs: Path) -> bool | None:
    """Whether a run that recorded a problem names an id; None for a run without a problem (not searched)."""
    from dagster._serdes import serialize_value

    run = record.dagster_run
    events = instance.all_logs(run.run_id)
    if run.status.value not in ("FAILURE", "CANCELED") and not any(e.level >= logging.WARNING for e in events):
        return None
    if _names(pattern, serialize_value(run)) or any(_names(pattern, serialize_value(e)) for e in events):
        return True
    files = [p for p in (logs / run.run_id).rglob("*") if p.is_file()]
    return any(_file_names(pattern, p) for p in files + _launcher_logs(logs, run.tags.get(LAUNCH_TAG)))


def _delete_run(instance: Any, run_id: str, token: str | None, logs: Path) -> int:
    """Delete a run, its events and check executions, its compute logs and its launcher's log; files deleted."""
    from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable

    instance.delete_run(run_id)
    storage = instance.event_log_storage
    with storage.index_connection() as conn:  # delete_run leaves them, each with its evaluation's metadata
        conn.execute(AssetCheckExecutionsTable.delete().where(AssetCheckExecutionsTable.c.run_id == run_id))
    files = [p for p in (logs / run_id).rglob("*") if p.is_file()] + _launcher_logs(logs, token)
    shutil.rmtree(logs / run_id, ignore_errors=True)
    for path in files:
        path.unlink(missing_ok=True)
    return len(files)


def vacuum(storage: Path) -> int:
    """Rewrite every sqlite file of the instance without its free pages and truncate its WAL; files vacuumed."""
    done = 0
    for path in sorted(storage.rglob("*.db")):
        with open(path, "rb") as handle:
            if handle.read(16) != b"SQLite format 3\x00":
                continue
        with closing(sqlite3.connect(path, timeout=60, isolation_level=None)) as con:
            con.execute("VACUUM")
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        done += 1
    return done


def _home_env(settings: Settings) -> dict[str, str]:
    """The home's Dagster instance, as ``commands.dagster_env`` names it (imported, it would close an import cycle)."""
    storage = settings.home_path / "dagster"
    return {**os.environ, "DAGSTER_HOME": str(PROJECT_ROOT), "PRAG_DAGSTER_STORAGE": str(storage),
            "PRAG_DAGSTER_LOGS": str(storage / "logs")}  # fmt: skip


def erase_dagster_records(settings: Settings, ids: set[str]) -> dict[str, int]:
    """Delete the home instance's runs (and their logs) that name any of the ids, then vacuum its sqlite files;
    counts of what went (runs, log files) and of the runs still going that were left."""
    from prag_assets.cli.doctor import instance as home_instance

    storage = settings.home_path / "dagster"
    logs = storage / "logs"
    if not (storage / "history").exists():  # no run was ever recorded: nothing to search (and nothing to create)
        return {}
    pattern = id_pattern(ids)
    runs = files = going = 0
    claimed: set[Path] = set()
    with home_instance(settings, _home_env(settings)) as instance:
        for record in instance.get_run_records():
            run = record.dagster_run
            token = run.tags.get(LAUNCH_TAG)
            claimed |= set(_launcher_logs(logs, token))
            if not _run_names(instance, record, pattern, logs):
                continue
            if run.status.value in GOING:
                going += 1
                continue
            files += _delete_run(instance, run.run_id, token, logs)
            runs += 1
    for path in sorted(p for p in logs.glob("*.log") if p.is_file() and p not in claimed):
        if _file_names(pattern, path):  # a launcher's log of a run Dagster never recorded
            path.unlink()
            files += 1
    vacuum(storage)
    counts = {"dagster_runs": runs, "dagster_log_files": files}
    return counts | ({"dagster_runs_going": going} if going else {})


def source_ids(settings: Settings, user_id: str, task: str | None = None) -> set[str]:
    """The ids that name the user in the configured LaMP files (its samples, their documents, its malformed records),
    read leniently: a run that stopped on the user's malformed record loaded none of its rows into DuckDB, so only
    the source knows the record ids its error names. Nothing where the files cannot be read."""
    from prag_models.data.set_aside import SetAside
    from prag_models.data.source import load_task_samples

    lenient = settings.model_copy(update={"data": settings.data.model_copy(update={"malformed": "set_aside"})})
    ids: set[str] = set()
    for name in [task] if task else list(settings.data.tasks):
        rows: list[SetAside] = []
        try:
            splits = load_task_samples(lenient, name, rows)
        except (OSError, ValueError, KeyError):  # no files for this task, or not LaMP's layout: nothing to name
            continue
        for sample in (s for split in splits.values() for s in split if s.user_id == user_id):
            ids |= {sample.sample_id, *(doc.doc_id for doc in sample.profile)}
        ids |= {row.record_id for row in rows if row.user_id == user_id and not row.record_id.startswith("#")}
    return ids
