"""Dynamic users (docs/methods.md §3.7): history ingestion, incremental user updates, and the drift of full
re-clusterings.

Group ``history``: ``profile_history`` (drop folder → history table), ``incremental_user_clusters`` (changed users'
documents, embeddings and clusters) and ``incremental_similar_users`` (neighbour lists of the affected clusters).
Group ``users``: ``cluster_drift`` and ``cluster_state``, which follow every full ``user_clusters`` materialization.
"""

import dagster as dg
import pandas as pd

from prag_assets.assets.users import similar_users, user_clusters, user_embeddings
from prag_assets.builders.task_table import CODE_VERSION
from prag_assets.execution import run_tasks
from prag_assets.metadata import preview, report_partitions
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.models import ModelsResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.data.history import ensure_history_table, has_table
from prag_models.data.sharing import newest_statement
from prag_models.privacy.rules import publish_if_consent_changed, sharing_rule
from prag_models.stages.history import (
    UPDATED_TABLES,
    append_drift,
    ingest_inbox,
    ingest_stats,
    latest_history,
    snapshot_clustering,
    task_drift,
    update_summary,
)
from prag_models.users.incremental import NotMaterializedError, ensure_tables, refresh_similar_users, update_users

GROUP = "history"
_COMMON = dict(partitions_def=task_partitions, backfill_policy=single_run, pool=DUCKDB_POOL, kinds={"duckdb"})


def _record_rewrites(
    context: dg.AssetExecutionContext, task: str, keys: tuple[str, ...], description: str, metadata: dict
) -> None:
    """Record that this step rewrote some rows of assets defined elsewhere, as materializations of their partition.

    Not a multi_asset: Dagster allows one definition per asset key (a second spec of ``user_clusters`` fails with
    "Duplicate asset key"), so an op reports a write to another asset's table with a runtime AssetMaterialization,
    which Dagster stores like any other (downstream assets become stale, partition checks target it)."""
    for key in keys:
        context.log_event(dg.AssetMaterialization(asset_key=key, partition=task, description=description,
                                                  metadata={**metadata, "incremental": True}))  # fmt: skip


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
        before = newest_statement(con)
        for task in run_tasks(context, settings):
            ingested, bad = ingest_inbox(con, settings.home_path, task, settings.data.undated, context.log.error)
            rejected += [f"{task}/{path.name}: {error}" for path, error in bad]
            stats[task] = ingest_stats(con, settings.home_path, task, ingested, len(bad))
        published = publish_if_consent_changed(con, before)  # withdrawn consent reaches the readers now
        if published is not None:
            context.log.info(f"consent statements ingested: readers' snapshot republished ({published})")
        last = latest_history(con, 500)
        shown = {task: {"latest_rows": preview(last[last["task"] == task])} for task in stats}
        report_partitions(context, con, "profile_history", stats, shown)
    return dg.MaterializeResult(
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
            row, stats[task] = task_drift(con, task, context.run_id)
            rows.append(row)
            context.log.info(f"{task}: drift {stats[task]}")
        append_drift(con, rows)
        report_partitions(context, con, "cluster_drift", stats)
    return dg.MaterializeResult()


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
            stats[task] = snapshot_clustering(con, task)
        report_partitions(context, con, "cluster_state", {task: {"users": n} for task, n in stats.items()})
    return dg.MaterializeResult()


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
    updated: dict[str, pd.DataFrame] = {}

    def embed(texts):
        return models.embedder().embed(texts)  # loads the model only when a text is not in the cache

    with duckdb.connect() as con:
        ensure_tables(con)
        for task in run_tasks(context, settings):
            try:
                shaping = sharing_rule(con, task, settings.privacy.default_share)  # docs/privacy.md
                report = update_users(con, task, embed, settings.embedder.model, settings.clustering, context.run_id,
                                      shaping)  # fmt: skip
            except NotMaterializedError as exc:
                context.log.warning(f"{exc}; the history stays pending")
                stats[task] = {"skipped": str(exc)}
                continue
            stats[task], frame = update_summary(report)
            if len(frame):
                updated[task] = frame
                _record_rewrites(context, task, UPDATED_TABLES, f"incremental update of {len(frame)} users (run "
                                 f"{context.run_id})", {"users_updated": len(frame)})  # fmt: skip
            context.log.info(f"{task}: {stats[task]}")
        shown = {task: {"preview": preview(frame.drop(columns=["run_id"], errors="ignore"), 10)}
                 for task, frame in updated.items()}  # fmt: skip
        report_partitions(context, con, "incremental_updates", stats, shown)
    return dg.MaterializeResult()


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
            stats[task] = refresh_similar_users(con, task, settings.clustering.similar_users, context.run_id)
            if stats[task]["users"]:
                _record_rewrites(context, task, ("similar_users",),
                                 f"incremental refresh of {stats[task]['clusters']} clusters", stats[task])  # fmt: skip
        report_partitions(context, con, "similar_users", stats)
    return dg.MaterializeResult()
