"""Dynamic users (docs/methods.md §3.7): history ingestion, incremental user updates, and the drift of full
re-clusterings.

Group ``history``: ``profile_history`` (drop folder → history table), ``incremental_user_clusters`` (changed users'
documents, embeddings and clusters) and ``incremental_similar_users`` (neighbour lists of the affected clusters).
Group ``users``: ``cluster_drift`` and ``cluster_state``, which follow every full ``user_clusters`` materialization.
"""

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import duckdb as duckdb_lib
import pandas as pd

from prag_assets.assets.users import similar_users, user_clusters, user_embeddings
from prag_assets.common import preview, run_tasks
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, ModelsResource, PragSettingsResource
from prag_assets.task_table import CODE_VERSION
from prag_models.config import Settings
from prag_models.data.history import (
    HISTORY_TABLE,
    IngestResult,
    append_history,
    archive_file,
    ensure_history_table,
    has_table,
    inbox_dir,
    inbox_entries,
    parse_history_file,
)
from prag_models.data.tasks import LampDataError
from prag_models.store import DuckDBBusyError
from prag_models.users.incremental import (
    STATE_TABLE,
    NotMaterializedError,
    clustering_drift,
    ensure_tables,
    refresh_similar_users,
    update_users,
)

GROUP = "history"
_COMMON = dict(partitions_def=task_partitions, backfill_policy=single_run, pool=DUCKDB_POOL, kinds={"duckdb"})
_DRIFT_DDL = (
    "task VARCHAR, run_id VARCHAR, computed_at TIMESTAMP, users_compared BIGINT, new_users BIGINT, "
    "removed_users BIGINT, clusters_before BIGINT, clusters_after BIGINT, changed_share DOUBLE, adjusted_rand DOUBLE"
)
_UPDATED_TABLES = ("profile_documents", "document_embeddings", "user_embeddings", "user_clusters")


def _reject(context: dg.AssetExecutionContext, path: Path, error: str) -> None:
    """Move a drop-folder entry to rejected/ with its error beside it; a failed move is logged, never raised."""
    error = error.encode("utf-8", "backslashreplace").decode("utf-8")
    context.log.error(f"rejected {path.name}: {error}")
    try:
        archive_file(path, "rejected", error)
    except OSError as exc:
        context.log.error(f"could not move {path} to rejected/: {exc}")


def _ingest_inbox(
    context: dg.AssetExecutionContext, con: duckdb_lib.DuckDBPyConnection, settings: Settings, task: str
) -> tuple[list[IngestResult], list[tuple[Path, str]]]:
    """Ingest each regular file of a task's drop folder on its own (one transaction per file); every failing or refused
    entry goes to rejected/ with the reason, and the others are still ingested. (ingest results, [(path, error)])."""
    files, refused = inbox_entries(settings.home_path, task)
    bad: list[tuple[Path, str]] = list(refused)
    results = []
    for path in files:
        try:
            batch = parse_history_file(path, task, settings.data.undated)
            results.append(append_history(con, [batch]))
        except (duckdb_lib.IOException, DuckDBBusyError):
            raise  # the DuckDB file, not this file, is the problem: the file stays for the next run
        except (LampDataError, OSError, ValueError, duckdb_lib.Error) as exc:
            bad.append((path, str(exc) or type(exc).__name__))
            continue
        try:
            archive_file(path, "done")
        except OSError as exc:
            context.log.error(f"could not move {path} to done/: {exc} (a later run skips it: same batch id)")
    for path, error in bad:
        _reject(context, path, error)
    return results, bad


@dg.asset(
    code_version=CODE_VERSION,
    group_name=GROUP,
    description="Append-only table of new profile documents for existing or new users, with ingestion time and "
    "batch id. Filled by `prag ingest FILE --task T` and, when this asset runs, from the drop folder "
    "<home>/inbox/<task>/*.json (valid files move to done/, invalid ones to rejected/ with the error beside them).",
    check_specs=[
        dg.AssetCheckSpec(
            "inbox_files_valid",
            asset="profile_history",
            description="Every drop-folder file of this run passed validation (a rejected file is a warning).",
        )
    ],
    **_COMMON,
)
def profile_history(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Ingest the drop folder of each task into profile_history (one batch per valid file)."""
    settings = prag_settings.get()
    stats: dict[str, dict] = {}
    rejected: list[str] = []
    with duckdb.connect() as con:
        ensure_history_table(con)
        for task in run_tasks(context, settings):
            ingested, bad = _ingest_inbox(context, con, settings, task)
            rejected += [f"{task}/{path.name}: {error}" for path, error in bad]
            total, users = con.execute(
                f"SELECT count(*), count(DISTINCT user_id) FROM {HISTORY_TABLE} WHERE task = ?", [task]
            ).fetchall()[0]
            stats[task] = {
                "files_ingested": sum(1 for r in ingested for _, _, n in r.batches if n),
                "rows_appended": sum(n for r in ingested for _, _, n in r.batches),
                "files_rejected": len(bad),
                "new_users": len({u for r in ingested for u in r.new_users}),
                "history_rows": int(total),
                "history_users": int(users),
                "inbox": str(inbox_dir(settings.home_path, task)),
            }
        last = con.execute(f"SELECT * FROM {HISTORY_TABLE} ORDER BY seq DESC LIMIT 5").df()
    return dg.MaterializeResult(
        metadata={"per_task": dg.MetadataValue.json(stats), "latest_rows": preview(last.drop(columns=["text"]))},
        check_results=[
            dg.AssetCheckResult(
                check_name="inbox_files_valid",
                passed=not rejected,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"rejected": dg.MetadataValue.md("\n".join(f"- {r}" for r in rejected) or "none")},
            )
        ],
    )


@dg.asset(
    code_version=CODE_VERSION,
    group_name="users",
    deps=[user_clusters],
    description="Drift of a full re-clustering: share of users whose cluster changed (after the best one-to-one "
    "matching of cluster ids) and adjusted Rand index against the clustering in effect before (cluster_state, "
    "incremental assignments included); appended to table cluster_drift.",
    **_COMMON,
)
def cluster_drift(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Compare the new user_clusters with the previous clustering of each task."""
    settings = prag_settings.get()
    stats: dict[str, dict] = {}
    rows = []
    with duckdb.connect() as con:
        ensure_tables(con)
        for task in run_tasks(context, settings):
            current = dict(con.execute("SELECT user_id, cluster FROM user_clusters WHERE task = ?", [task]).fetchall())
            previous = dict(
                con.execute(f"SELECT user_id, cluster FROM {STATE_TABLE} WHERE task = ?", [task]).fetchall()
            )
            drift = clustering_drift(previous, current)
            stats[task] = drift if previous else {**drift, "note": "no previous clustering"}
            rows.append(
                {"task": task, "run_id": context.run_id, "computed_at": datetime.now(UTC).replace(tzinfo=None), **drift}
            )
            context.log.info(f"{task}: drift {stats[task]}")
        if rows:
            con.execute(f"CREATE TABLE IF NOT EXISTS cluster_drift ({_DRIFT_DDL})")
            frame = pd.DataFrame(rows)
            con.register("_drift", frame)
            cols = ", ".join(frame.columns)
            con.execute(f"INSERT INTO cluster_drift ({cols}) SELECT {cols} FROM _drift")
            con.unregister("_drift")
    shares = [s["changed_share"] for s in stats.values() if s["changed_share"] is not None]
    rands = [s["adjusted_rand"] for s in stats.values() if s["adjusted_rand"] is not None]
    return dg.MaterializeResult(
        metadata={
            "per_task": dg.MetadataValue.json(stats),
            "max_changed_share": max(shares) if shares else None,
            "min_adjusted_rand": min(rands) if rands else None,
        }
    )


@dg.asset(
    code_version=CODE_VERSION,
    group_name="users",
    deps=[cluster_drift, user_embeddings],
    description="Snapshot of the last full clustering: each user's embedding and cluster as fitted (a pickle-free "
    "form of the model: re-fitting on it reproduces the clustering for incremental assignment) plus its current "
    "cluster (kept up to date by incremental updates, the baseline of the next drift).",
    **_COMMON,
)
def cluster_state(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Snapshot user_embeddings + user_clusters of each task into cluster_state."""
    settings = prag_settings.get()
    stats = {}
    with duckdb.connect() as con:
        ensure_tables(con)
        for task in run_tasks(context, settings):
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(f"DELETE FROM {STATE_TABLE} WHERE task = ?", [task])
                con.execute(
                    f"INSERT INTO {STATE_TABLE} SELECT u.task, u.user_id, u.embedding, c.cluster, c.cluster, "
                    "?::TIMESTAMP FROM user_embeddings u JOIN user_clusters c USING (task, user_id) "
                    "WHERE task = ? ORDER BY u.user_id",
                    [datetime.now(UTC).replace(tzinfo=None), task],
                )
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
            stats[task] = con.execute(f"SELECT count(*) FROM {STATE_TABLE} WHERE task = ?", [task]).fetchall()[0][0]
    return dg.MaterializeResult(metadata={"users_per_task": dg.MetadataValue.json(stats)})


@dg.asset(
    code_version=CODE_VERSION,
    group_name=GROUP,
    deps=[profile_history, similar_users, cluster_state],
    kinds={"duckdb", "pytorch"},
    description="Incremental update of the users with pending history (docs/methods.md §3.7): new documents embedded "
    "through the cache, z_u = mean over all the user's documents (cold start: query embedding), cluster by HDBSCAN "
    "approximate prediction against the current clustering; rewrites only those users' rows of profile_documents, "
    "document_embeddings, user_embeddings and user_clusters. One row per updated user in incremental_updates.",
    **{k: v for k, v in _COMMON.items() if k != "kinds"},
)
def incremental_user_clusters(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> dg.MaterializeResult:
    """Apply pending history documents to the changed users of each task."""
    settings = prag_settings.get()
    stats: dict[str, dict] = {}
    updated = []

    def embed(texts):
        return models.embedder().embed(texts)  # loads the model only when a text is not in the cache

    with duckdb.connect() as con:
        ensure_tables(con)
        for task in run_tasks(context, settings):
            try:
                report = update_users(con, task, embed, settings.embedder.model, settings.clustering, context.run_id)
            except NotMaterializedError as exc:
                context.log.warning(f"{exc}; the history stays pending")
                stats[task] = {"skipped": str(exc)}
                continue
            frame = pd.DataFrame(report.users)
            moved = int(((frame["old_cluster"] != frame["new_cluster"]) & ~frame["is_new"]).sum()) if len(frame) else 0
            stats[task] = {
                "users_updated": len(frame),
                "new_users": int(frame["is_new"].sum()) if len(frame) else 0,
                "users_changing_cluster": moved,
                "newly_embedded": report.newly_embedded,
                "reference": report.reference,
                "reference_agreement": report.reference_agreement,
            }
            if len(frame):
                updated.append(frame)
                for key in _UPDATED_TABLES:
                    context.log_event(
                        dg.AssetMaterialization(
                            asset_key=key,
                            partition=task,
                            description=f"incremental update of {len(frame)} users (run {context.run_id})",
                            metadata={"users_updated": len(frame), "incremental": True},
                        )
                    )
            context.log.info(f"{task}: {stats[task]}")
    rows = pd.concat(updated, ignore_index=True) if updated else pd.DataFrame()
    return dg.MaterializeResult(
        metadata={
            "per_task": dg.MetadataValue.json(stats),
            "users_updated": len(rows),
            "preview": preview(rows.drop(columns=["run_id"], errors="ignore"), 10),
        }
    )


@dg.asset(
    code_version=CODE_VERSION,
    group_name=GROUP,
    deps=[incremental_user_clusters],
    description="Similar-user lists refreshed for every member of the clusters that updated users left or joined "
    "(other users' rows of similar_users are untouched).",
    **_COMMON,
)
def incremental_similar_users(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Recompute intra-cluster neighbours of the affected clusters of each task."""
    settings = prag_settings.get()
    stats = {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            if not has_table(con, "similar_users"):
                stats[task] = {"skipped": "similar_users does not exist yet"}
                continue
            stats[task] = refresh_similar_users(con, task, settings.clustering.similar_users)
            if stats[task]["users"]:
                context.log_event(
                    dg.AssetMaterialization(
                        asset_key="similar_users",
                        partition=task,
                        description=f"incremental refresh of {stats[task]['clusters']} clusters",
                        metadata={**stats[task], "incremental": True},
                    )
                )
    return dg.MaterializeResult(metadata={"per_task": dg.MetadataValue.json(stats)})
