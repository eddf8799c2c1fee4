"""Forgetting a user (docs/privacy.md): every row of the user in DuckDB is deleted in one transaction, the erasure is
audited (who, when, counts per table; never content), and every registered model of the user's tasks is flagged
for retraining (model-version tag ``privacy.needs_retraining``).

Which rows are the user's, in every table of the file (found by their columns, so a new table is covered too):
the user's own rows (``user_id``), other users' rows that point at the user (``source_user_id``, ``neighbour_id``:
retrieved documents, neighbour lists, feedback labels), rows keyed by the user's samples (``sample_id``: query
embeddings, generations, per-sample scores), rows keyed only by the user's documents or texts (``doc_id`` of no
remaining user: relevance labels; ``content_hash``: the embedding cache, whose rows are the vectors of the user's
document texts, questions and, for taste similarity, document titles — each under the hash of its text) and the LLM
cache entries whose provenance (``users``: whose input, documents and gold the prompt shows, llm/cache.py) names the
user, or is not known (rows cached before provenance: a cache is only a cache). With ``task`` only that task's rows
go (tables without a task column are matched by the user's ids of that task; the LLM cache records users, not tasks,
so the user's entries of every task go). Cache entries are never matched by text: a document or input cut short by
the prompt budget matches no whole text, and every LaMP input starts with the task's fixed template. A cached vector
whose text another remaining user (or, erasing one task, the user in another task) still has — as a document, a
question or a title — stays: it is that text's vector, not the erased user's.

DuckDB does not overwrite the blocks deleted rows leave in the file, so ``compact_file`` then rewrites the file
(COPY FROM DATABASE into a new file, then an atomic rename), as the readers' snapshot is built.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from prag_models.llm.cache import CACHE_TABLE, USERS_COLUMN, ensure_cache_table
from prag_models.storage.faults import maybe_fail
from prag_models.storage.hashing import SQL_HASH
from prag_models.storage.store import snapshot_path, table_exists, transaction

AUDIT_TABLE = "erasure_audit"
AUDIT_DDL = (
    "erasure_id VARCHAR, user_id VARCHAR, task VARCHAR, erased_at TIMESTAMP, rows_deleted BIGINT, "
    "tables_json VARCHAR, models_flagged_json VARCHAR, records_json VARCHAR"
)
#: Columns naming a user: the row's user, the author of a retrieved document, a neighbour.
USER_COLUMNS = ("user_id", "source_user_id", "neighbour_id")
#: Tables never searched for the user: the audit itself (it names who was erased, by design).
KEPT_TABLES = (AUDIT_TABLE,)
RETRAIN_TAG = "privacy.needs_retraining"
ERASURES_TAG = "privacy.erasures"


@dataclass
class Erasure:
    """What one ``forget`` did: rows deleted per table, the model versions flagged, and whether it was a no-op."""

    erasure_id: str
    user_id: str
    task: str | None
    erased_at: datetime
    deleted: dict[str, int] = field(default_factory=dict)
    models_flagged: list[str] = field(default_factory=list)
    already_erased: bool = False
    #: records outside DuckDB erased, counts only (prag_assets/cli/forget_records.py: Dagster's runs and log files)
    records: dict[str, int] = field(default_factory=dict)

    @property
    def rows_deleted(self) -> int:
        """Rows deleted over all tables."""
        return sum(self.deleted.values())


def _tables(con) -> dict[str, set[str]]:
    """Columns of every base table of the main schema."""
    rows = con.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main' "
        "AND table_name IN (SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE')"
    ).fetchall()
    out: dict[str, set[str]] = {}
    for table, column in rows:
        out.setdefault(table, set()).add(column)
    return out


def _owned(con, tables: dict[str, set[str]], user_id: str, task: str | None) -> pd.DataFrame:
    """(task, kind, value) of the user's ids: its samples and documents, per task."""
    parts = []
    where, params = ("user_id = ?", [user_id]) if task is None else ("user_id = ? AND task = ?", [user_id, task])
    if "lamp_samples" in tables:
        parts.append(f"SELECT task, 'sample' AS kind, sample_id AS value FROM lamp_samples WHERE {where}")
    for table in ("profile_documents", "profile_history", "lamp_sample_profiles"):
        if {"task", "user_id", "doc_id"} <= tables.get(table, set()):
            parts.append(f"SELECT task, 'doc', doc_id FROM {table} WHERE {where}")
    if not parts:
        return pd.DataFrame(columns=["task", "kind", "value"])
    sql = " UNION ".join(parts)
    rows = con.execute(sql, params * len(parts)).fetchall()
    return pd.DataFrame(rows, columns=["task", "kind", "value"]).dropna()


#: A document's title in its fields (LaMP-1/4/5): taste similarity embeds it through the cache (users/taste.py).
_TITLE = "try(json_extract_string(fields_json, '$.title'))"


def _hash_sources(tables: dict[str, set[str]]) -> list[str]:
    """SQL of (task, user_id, value) for every text whose vector the embedding cache may hold for a user: the
    ``content_hash`` of any table's rows (documents, history, document and query embeddings), document titles and
    questions (the hash of the text, as the stages key the cache)."""
    out = []
    for table, cols in sorted(tables.items()):
        if table in KEPT_TABLES or not {"task", "user_id"} <= cols:
            continue
        if "content_hash" in cols:
            out.append(f'SELECT task, user_id, content_hash AS value FROM "{table}"')
        if "fields_json" in cols:
            out.append(f'SELECT task, user_id, {SQL_HASH.format(_TITLE)} AS value FROM "{table}" '
                       f"WHERE {_TITLE} IS NOT NULL")
    if {"task", "user_id", "query"} <= tables.get("lamp_samples", set()):
        out.append(f"SELECT task, user_id, {SQL_HASH.format('query')} AS value FROM lamp_samples")
    return out


def _cache_hashes(con, tables: dict[str, set[str]], user_id: str, task: str | None) -> pd.DataFrame:
    """(task, 'hash', value) of the user's text hashes (of the task) that no other user — nor the user in another
    task, when only one is erased — still has: their cached vectors are the user's alone."""
    sources = _hash_sources(tables)
    if not sources:
        return pd.DataFrame(columns=["task", "kind", "value"])
    union = " UNION ALL ".join(sources)
    mine = "user_id = $user" + (" AND task = $task" if task is not None else "")
    sql = (f"SELECT DISTINCT value FROM ({union}) WHERE {mine} AND value IS NOT NULL "
           f"EXCEPT SELECT value FROM ({union}) WHERE NOT coalesce({mine}, false)")  # fmt: skip
    params: dict[str, Any] = {"user": user_id} | ({"task": task} if task is not None else {})
    values = sorted(v for (v,) in con.execute(sql, params).fetchall())
    return pd.DataFrame({"task": None, "kind": "hash", "value": values}, columns=["task", "kind", "value"])


def _known(con, tables: dict[str, set[str]], user_id: str, task: str | None) -> bool:
    """Whether any table holds a row of the user (of the task)."""
    for table, cols in tables.items():
        if table in KEPT_TABLES or "user_id" not in cols or (task is not None and "task" not in cols):
            continue
        sql = f'SELECT 1 FROM "{table}" WHERE user_id = ?' + (" AND task = ?" if task is not None else "") + " LIMIT 1"
        if con.execute(sql, [user_id] + ([task] if task is not None else [])).fetchall():
            return True
    return False


def _conditions(cols: set[str], table: str) -> list[str]:
    """SQL conditions (over the registered frame ``_forget_ids``) that select the user's rows of a table."""
    tasked = "task" in cols
    match = " AND f.task = t.task" if tasked else ""
    conds = [f"t.{c} = $user" for c in USER_COLUMNS if c in cols]
    if "sample_id" in cols:
        conds.append(f"EXISTS (SELECT 1 FROM _forget_ids f WHERE f.kind = 'sample' AND f.value = t.sample_id{match})")
    if "prompt_hash" in cols:  # a generation or cache entry of a prompt that showed the user's question or document
        conds.append("EXISTS (SELECT 1 FROM _forget_ids f WHERE f.kind = 'prompt' AND f.value = t.prompt_hash)")
    if table == CACHE_TABLE:  # an LLM cache entry by its provenance; NULL: not known, so perhaps the user's
        conds.append(f"list_contains(t.{USERS_COLUMN}, $user) OR t.{USERS_COLUMN} IS NULL")
    if set(USER_COLUMNS) & cols:  # a row of another user that merely shares an id or a text with the user stays
        return conds
    if "doc_id" in cols:
        conds.append(f"EXISTS (SELECT 1 FROM _forget_ids f WHERE f.kind = 'orphan' AND f.value = t.doc_id{match})")
    if "content_hash" in cols:
        conds.append("EXISTS (SELECT 1 FROM _forget_ids f WHERE f.kind = 'hash' AND f.value = t.content_hash)")
    return conds


def _prompt_hashes(con, tables: dict[str, set[str]], user_id: str, task: str | None, samples: list[str]) -> set[str]:
    """Prompt hashes tied to the user by ids: on rows of the user or its samples, and on generations rows whose
    retrieval (same task, method and sample) showed one of the user's documents."""
    out: set[str] = set()
    scope = (" AND g.task = ?", [task]) if task is not None else ("", [])
    con.register("_forget_samples", pd.DataFrame({"sample_id": pd.Series(samples, dtype="string")}))
    try:
        for table, cols in tables.items():
            if table in KEPT_TABLES or "prompt_hash" not in cols:
                continue
            conds = ["g.user_id = ?"] if "user_id" in cols else []
            conds += ["g.sample_id IN (SELECT sample_id FROM _forget_samples)"] if "sample_id" in cols else []
            task_scope = scope if "task" in cols else ("", [])
            if conds:
                sql = f'SELECT g.prompt_hash FROM "{table}" g WHERE ({" OR ".join(conds)}){task_scope[0]}'
                params = ([user_id] if "user_id" in cols else []) + task_scope[1]
                out |= {h for (h,) in con.execute(sql, params).fetchall() if h is not None}
            if not {"task", "method", "sample_id"} <= cols:
                continue
            for shown, scols in tables.items():
                if shown in KEPT_TABLES or not {"task", "method", "sample_id", "source_user_id"} <= scols:
                    continue
                sql = (f'SELECT DISTINCT g.prompt_hash FROM "{table}" g JOIN "{shown}" r USING (task, method, '
                       f"sample_id) WHERE r.source_user_id = ?{scope[0]}")  # fmt: skip
                out |= {h for (h,) in con.execute(sql, [user_id, *scope[1]]).fetchall() if h is not None}
    finally:
        con.unregister("_forget_samples")
    return out


def _ids(con, tables: dict[str, set[str]], user_id: str, task: str | None) -> pd.DataFrame:
    """The user's ids to match: samples, orphan documents (no other user has them), the hashes of the texts whose
    cached vectors are the user's alone (documents, titles, questions) and the prompt hashes tied to the user by
    ids."""
    owned = _owned(con, tables, user_id, task)
    samples = owned[owned["kind"] == "sample"]
    frames = [samples]
    docs = owned[owned["kind"] == "doc"]
    if "profile_documents" in tables:  # ids another user still has are not the user's alone
        kept = "user_id <> ?" + (" OR task <> ?" if task else "")
        sql = f"SELECT task, doc_id FROM profile_documents WHERE {kept}"
        other_docs = set(con.execute(sql, [user_id, task] if task else [user_id]).fetchall())
        docs = docs[[(t, d) not in other_docs for t, d in zip(docs["task"], docs["value"], strict=True)]]
    frames += [docs.assign(kind="orphan"), _cache_hashes(con, tables, user_id, task)]
    prompts = _prompt_hashes(con, tables, user_id, task, samples["value"].astype(str).tolist())
    frames.append(pd.DataFrame([(None, "prompt", h) for h in sorted(prompts)], columns=["task", "kind", "value"]))
    return pd.concat(frames, ignore_index=True).astype({"value": str})


def start_erasure(con, user_id: str, task: str | None = None, now: datetime | None = None) -> Erasure:
    """A new erasure of a user no table has forgotten yet; ``already_erased`` when an earlier one did (idempotent);
    LookupError for a user no table ever held."""
    now = now or datetime.now(UTC).replace(tzinfo=None)
    erasure = Erasure(uuid.uuid4().hex[:16], user_id, task, now)
    if _known(con, _tables(con), user_id, task):
        return erasure
    if table_exists(con, AUDIT_TABLE):
        sql = f"SELECT count(*) FROM {AUDIT_TABLE} WHERE user_id = ? AND (task = ? OR task IS NULL OR ? IS NULL)"
        if con.execute(sql, [user_id, task, task]).fetchall()[0][0]:
            erasure.already_erased = True
            return erasure
    scope = f" in {task}" if task else ""
    raise LookupError(f"unknown user {user_id!r}{scope}: no table holds a row of this user")


def forget_rows(con, erasure: Erasure) -> Erasure:
    """Delete every row of the erasure's user (of its task) from every table in ONE transaction and audit it (with
    the model versions already flagged)."""
    if table_exists(con, CACHE_TABLE):
        ensure_cache_table(con)  # a cache from before provenance gets the column, NULL: its rows all go
    user_id, task, tables = erasure.user_id, erasure.task, _tables(con)
    ids = _ids(con, tables, user_id, task)
    con.register("_forget_ids", ids)
    try:
        with transaction(con):
            for table, cols in sorted(tables.items()):
                conds = [] if table in KEPT_TABLES else _conditions(cols, table)
                if not conds:
                    continue
                scope = " AND t.task = $task" if task is not None and "task" in cols else ""
                sql = f'DELETE FROM "{table}" t WHERE ({" OR ".join(conds)}){scope}'
                params: dict[str, Any] = {"user": user_id} if "$user" in sql else {}
                params |= {"task": task} if "$task" in sql else {}
                n = int(con.execute(sql, params).fetchall()[0][0])
                if n:
                    erasure.deleted[table] = n
            con.execute(f"CREATE TABLE IF NOT EXISTS {AUDIT_TABLE} ({AUDIT_DDL})")
            con.execute(f"ALTER TABLE {AUDIT_TABLE} ADD COLUMN IF NOT EXISTS records_json VARCHAR")  # older audits
            con.execute(
                f"INSERT INTO {AUDIT_TABLE} (erasure_id, user_id, task, erased_at, rows_deleted, tables_json, "
                "models_flagged_json, records_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [erasure.erasure_id, user_id, task, erasure.erased_at, erasure.rows_deleted,
                 json.dumps(erasure.deleted), json.dumps(erasure.models_flagged), json.dumps(erasure.records)],
            )
            maybe_fail("table_write", [AUDIT_TABLE])  # reliability tests: die before the commit
    finally:
        con.unregister("_forget_ids")
    con.execute("CHECKPOINT")  # deleted rows leave the file's live blocks now, not at some later checkpoint
    return erasure


def _sync(path: Path) -> None:
    """fsync a file or folder: what is renamed or was renamed survives a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def compact_file(con, path: str | Path) -> Path:
    """Rewrite the DuckDB file with only its live rows (DuckDB never overwrites the blocks deleted rows leave behind):
    COPY FROM DATABASE into a new file beside it, then an atomic rename over it, as the readers' snapshot is built.
    ``con``: the caller's read-write connection on ``path`` (holding its lock), closed here: it still reads the old
    file. A crash leaves the old file or the new one whole: the old one is checkpointed first, so it has no WAL that
    could be replayed onto the new one."""
    live = Path(path)
    fresh, wal = live.with_name(live.name + ".compact"), live.with_name(live.name + ".wal")
    fresh_wal, snapshot_tmp = fresh.with_name(fresh.name + ".wal"), Path(f"{snapshot_path(live)}.tmp")
    for leftover in (fresh, fresh_wal, snapshot_tmp):  # of an interrupted copy (we hold the lock: nobody else copies)
        leftover.unlink(missing_ok=True)
    con.execute("CHECKPOINT")
    if wal.exists() and wal.stat().st_size:
        raise RuntimeError(f"{wal} still holds changes after a checkpoint: {live} was not compacted")
    (name,) = con.execute("SELECT current_database()").fetchone()
    con.execute(f"ATTACH '{fresh}' AS prag_compact")
    try:
        con.execute(f'COPY FROM DATABASE "{name}" TO prag_compact')
    finally:
        con.execute("DETACH prag_compact")
    if fresh_wal.exists():
        raise RuntimeError(f"{fresh} was not checkpointed when detached: {live} was not compacted")
    _sync(fresh)
    wal.unlink(missing_ok=True)  # an empty WAL of the old file
    os.replace(fresh, live)
    _sync(live.parent)
    con.close()
    return live


def flag_models(client: Any, erasure: Erasure, tasks: set[str]) -> list[str]:
    """Tag every version of the tasks' registered models created before the erasure as needing retraining."""
    flagged = []
    cutoff = int(erasure.erased_at.replace(tzinfo=UTC).timestamp() * 1000)
    for model in client.search_registered_models():
        if not any(model.name.endswith(f"-{t}") for t in tasks):
            continue
        for mv in client.search_model_versions(f"name = '{model.name}'"):
            if int(mv.creation_timestamp) > cutoff:
                continue
            erasures = [e for e in (mv.tags or {}).get(ERASURES_TAG, "").split(",") if e]
            client.set_model_version_tag(model.name, mv.version, RETRAIN_TAG, "true")
            client.set_model_version_tag(model.name, mv.version, ERASURES_TAG, ",".join([*erasures,
                                                                                          erasure.erasure_id]))
            flagged.append(f"{model.name}/{mv.version}")
    return sorted(flagged)


def erased_users(con, task: str) -> set[str]:
    """Users with an erasure on record for the task (or for every task): loading the source files again skips them,
    so an erased user does not come back with the next materialization (the audit is the suppression list)."""
    if not table_exists(con, AUDIT_TABLE):
        return set()
    sql = f"SELECT DISTINCT user_id FROM {AUDIT_TABLE} WHERE task = ? OR task IS NULL"
    return {u for (u,) in con.execute(sql, [task]).fetchall()}


def user_tasks(con, user_id: str) -> set[str]:
    """The tasks in which the user has samples or documents (before the erasure)."""
    out: set[str] = set()
    for table in ("lamp_samples", "profile_documents", "profile_history"):
        if table_exists(con, table):
            out |= {t for (t,) in con.execute(f"SELECT DISTINCT task FROM {table} WHERE user_id = ?",
                                               [user_id]).fetchall()}  # fmt: skip
    return out


def needs_retraining(tags: dict[str, str]) -> bool:
    """Whether a model version's tags mark it as trained on data of an erased user."""
    return tags.get(RETRAIN_TAG) == "true"


def flagged_versions(client: Any, names: Mapping[str, str], versions: Mapping[str, int | None]) -> str:
    """The promotion gate's check: versions of a bundle trained on data of a user erased since ("" = none)."""
    return ", ".join(
        f"{name} v{versions[kind]}" for kind, name in names.items()
        if versions.get(kind) is not None and needs_retraining(client.get_model_version(name, str(versions[kind])).tags)
    )  # fmt: skip


def user_ids(con, user_id: str, task: str | None = None) -> set[str]:
    """The ids that name the user (of the task) in records outside DuckDB: the user id, its sample and document ids
    and the ids of its records set aside as malformed."""
    ids = {user_id, *_owned(con, _tables(con), user_id, task)["value"].astype(str)}
    if table_exists(con, "set_aside_records"):
        scope = " AND task = ?" if task else ""
        sql = f"SELECT DISTINCT record_id FROM set_aside_records WHERE user_id = ?{scope}"
        ids |= {r for (r,) in con.execute(sql, [user_id, *([task] if task else [])]).fetchall() if r}
    return ids


def forget(con, user_id: str, task: str | None = None, client: Any = None,
           erase_records: Callable[[set[str]], dict[str, int]] | None = None) -> Erasure:  # fmt: skip
    """Forget a user (of one task, or everywhere): flag the models trained on its data first (a flag without the
    deletion only costs a retraining), erase the records outside DuckDB that name the user's ids (``erase_records``,
    returning counts: before the rows go, so that a rerun after a crash still knows the ids), then delete its rows
    in one transaction with the audit row."""
    erasure = start_erasure(con, user_id, task)
    if erasure.already_erased:
        return erasure
    if client is not None:
        erasure.models_flagged = flag_models(client, erasure, {task} if task else user_tasks(con, user_id))
    if erase_records is not None:
        erasure.records = erase_records(user_ids(con, user_id, task))
    return forget_rows(con, erasure)
