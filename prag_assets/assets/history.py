"""Dynamic users (docs/methods.md §3.7): history ingestion, incremental user updates, and the drift of full
re-clusterings.

Group ``lamp_data``: ``profile_history`` (drop folder → history table; ``profile_documents`` reads the latest version
of each of its documents, so every full run includes the history). Group ``history``: ``incremental_user_clusters``
(between full runs: the changed users' documents, embeddings and clusters) and ``incremental_similar_users``
(neighbour lists of the affected clusters).
Group ``users``: ``cluster_drift`` and ``cluster_state``, which follow every full ``user_clusters`` materialization.
"""

import dagster as dg

from prag_assets.assets.users import similar_users, user_clusters, user_embeddings
from prag_assets.builders.task_table import stage_asset, task_asset
from prag_assets.execution import TaskStep, run_stage
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
    snapshot_clustering,
    task_drift,
    update_summary,
)
from prag_models.text.embedder import embedder_key
from prag_models.users.incremental import NotMaterializedError, ensure_tables, refresh_similar_users, update_users

GROUP = "history"


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


@task_asset(
    "lamp_data",  # profile_documents reads it: no asset depends on a later group (the UI draws them in data order)
    description="Append-only table of new profile documents for existing or new users, with ingestion time and "
    "batch id. Filled by `prag ingest FILE --task T` and, when this asset runs, from the drop folder "
    "<home>/inbox/<task>/*.json (valid files move to done/, invalid ones to rejected/ with the error beside them). "
    "profile_documents reads the latest version of each document: a full run includes the whole history.",
    check_specs=[
        dg.AssetCheckSpec(
            "inbox_files_valid",
            asset="profile_history",
            description="Every drop-folder file of this run passed validation (a rejected file is a warning).",
        )
    ],
)
def profile_history(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Ingest the drop folder of each task into profile_history (one batch per valid file)."""
    settings = prag_settings.get()
    rejected: list[str] = []
    run: dict = {}

    def prepare(con) -> None:
        """The history table, and the newest consent statement before this run's ingestion."""
        ensure_history_table(con)
        run["before"] = newest_statement(con)

    def ingest(step: TaskStep) -> dict:
        """Ingest one task's drop folder."""
        ingested, bad = ingest_inbox(step.con, settings.home_path, step.task, settings.data.undated, context.log.error)
        # the file only: a reason may quote the user's data, and Dagster's records are not erased (docs/privacy.md)
        rejected.extend(f"{step.task}/{path.name} (its reason: rejected/*_{path.name}.error.txt in the drop folder)"
                        for path, _ in bad)  # fmt: skip
        return ingest_stats(step.con, settings.home_path, step.task, ingested, len(bad))

    def finish(con, _shown: dict[str, dict]) -> None:
        """Republish the readers' snapshot when consent changed (the metadata counts rows: it previews none)."""
        published = publish_if_consent_changed(con, run["before"])  # withdrawn consent reaches the readers now
        if published is not None:
            context.log.info(f"consent statements ingested: readers' snapshot republished ({published})")

    run_stage(context, ingest, settings=settings, duckdb=duckdb, table="profile_history", prepare=prepare,
              finish=finish)  # fmt: skip
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


@task_asset(
    "users",
    deps=[user_clusters],
    description="Drift of a full re-clustering: share of users whose cluster changed (after the best one-to-one "
    "matching of cluster ids) and adjusted Rand index against the clustering in effect before (cluster_state, "
    "incremental assignments included); appended to table cluster_drift.",
)
def cluster_drift(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Compare the new user_clusters with the previous clustering of each task."""
    rows = []

    def drift(step: TaskStep) -> dict:
        """One task's drift row."""
        row, stats = task_drift(step.con, step.task, context.run_id)
        rows.append(row)
        context.log.info(f"{step.task}: drift {stats}")
        return stats

    run_stage(context, drift, settings=prag_settings.get(), duckdb=duckdb, table="cluster_drift",
              prepare=ensure_tables, finish=lambda con, _: append_drift(con, rows))  # fmt: skip
    return dg.MaterializeResult()


@stage_asset(
    "users",
    table="cluster_state",
    prepare=ensure_tables,
    deps=[cluster_drift, user_embeddings],
    description="Snapshot of the last full clustering: each user's embedding and cluster as fitted (a pickle-free "
    "form of the model: re-fitting on it reproduces the clustering for incremental assignment) plus its current "
    "cluster (kept up to date by incremental updates, the baseline of the next drift).",
)
def cluster_state(step: TaskStep) -> dict:
    """Snapshot one task's user_embeddings + user_clusters into cluster_state."""
    return {"users": snapshot_clustering(step.con, step.task)}


@task_asset(
    GROUP,
    deps=[profile_history, similar_users, cluster_state],
    kinds={"duckdb", "pytorch"},
    description="Incremental update of the users with pending history (docs/methods.md §3.7: documents whose latest "
    "version profile_documents does not hold yet, i.e. ingested since the last full run): new documents embedded "
    "through the cache, z_u = mean of the user's shareable documents (cold start: query embedding; a user known only "
    "from documents others may not see gets no z_u and no cluster, docs/privacy.md), cluster by HDBSCAN "
    "approximate prediction against the current clustering; rewrites only those users' rows of profile_documents, "
    "document_embeddings, user_embeddings and user_clusters. One row per updated user in incremental_updates.",
)
def incremental_user_clusters(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> dg.MaterializeResult:
    """Apply pending history documents to the changed users of each task."""
    settings = prag_settings.get()

    def embed(texts):
        return models.embedder().embed(texts)  # loads the model only when a text is not in the cache

    def update(step: TaskStep) -> dict:
        """Update one task's changed users; its partition counts them (no ids: docs/privacy.md)."""
        try:
            shaping = sharing_rule(step.con, step.task, settings.privacy.default_share)  # docs/privacy.md
            report = update_users(step.con, step.task, embed, embedder_key(settings.embedder), settings.clustering,
                                  context.run_id, shaping)  # fmt: skip
        except NotMaterializedError as exc:
            context.log.warning(f"{exc}; the history stays pending")
            return {"skipped": str(exc)}
        stats, frame = update_summary(report)
        if len(frame):
            _record_rewrites(context, step.task, UPDATED_TABLES, f"incremental update of {len(frame)} users (run "
                             f"{context.run_id})", {"users_updated": len(frame)})  # fmt: skip
        context.log.info(f"{step.task}: {stats}")
        return stats

    run_stage(context, update, settings=settings, duckdb=duckdb, table="incremental_updates", prepare=ensure_tables)
    return dg.MaterializeResult()


@stage_asset(
    GROUP,
    table="similar_users",
    deps=[incremental_user_clusters],
    description="Similar-user lists refreshed for every member of the clusters that updated users left or joined "
    "(other users' rows of similar_users are untouched).",
)
def incremental_similar_users(step: TaskStep) -> dict:
    """Recompute the intra-cluster neighbours of one task's affected clusters."""
    if not has_table(step.con, "similar_users"):
        return {"skipped": "similar_users does not exist yet"}
    stats = refresh_similar_users(step.con, step.task, step.settings.clustering.similar_users, step.context.run_id)
    if stats["users"]:
        _record_rewrites(step.context, step.task, ("similar_users",),
                         f"incremental refresh of {stats['clusters']} clusters", stats)  # fmt: skip
    return stats
