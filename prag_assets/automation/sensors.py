"""Dynamic users (docs/methods.md §3.7): the history sensor, the full re-clustering schedule, and the jobs they launch.

``profile_history_sensor`` (default RUNNING) notices new rows of ``profile_history`` since its cursor that are still
pending and new files in the drop folders ``<home>/inbox/<task>/``; it launches ONE run of
``incremental_update_job`` for the whole batch of changes (a single task partition, or a task range) and none when
nothing changed. The sensor never reads a file's content (invalid files are the run's to reject) and never follows a
symbolic link in a drop folder (such entries are logged and the run moves them to ``rejected/``).
``full_reclustering_schedule`` (default STOPPED) re-clusters every configured task weekly and
reports the drift against the clustering in effect before (asset ``cluster_drift``).
"""

import hashlib

import dagster as dg

from prag_assets.assets import history, users
from prag_assets.partitions import task_partitions
from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import ALL_TASKS
from prag_models.stages.history import HistoryCursor, scan_changes
from prag_models.storage.store import DuckDBBusyError

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
_BUSY = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]

incremental_update_job = dg.define_asset_job(
    "incremental_update_job",
    selection=dg.AssetSelection.assets(
        history.profile_history, history.incremental_user_clusters, history.incremental_similar_users
    ),
    partitions_def=task_partitions,
    description="Ingest the drop folders, then update only the users with pending history: documents, "
    "embeddings, clusters (HDBSCAN approximate prediction) and the similar users of the affected clusters.",
)

full_reclustering_job = dg.define_asset_job(
    "full_reclustering_job",
    selection=dg.AssetSelection.assets(
        users.user_embeddings, users.user_clusters, users.similar_users, history.cluster_drift, history.cluster_state
    ),
    partitions_def=task_partitions,
    description="Re-cluster every user from scratch (history documents included), refresh all similar-user lists, "
    "report the drift against the previous clustering and snapshot the new one for incremental updates.",
)


def task_run_request(tasks: list[str], **kwargs) -> dg.RunRequest:
    """One run over the given tasks: a single partition, or the task range covering them (single-run policy)."""
    ordered = [t for t in ALL_TASKS if t in set(tasks)]
    if not ordered:
        raise ValueError("no task to run")
    if len(ordered) == 1:
        return dg.RunRequest(partition_key=ordered[0], **kwargs)
    tags = {**kwargs.pop("tags", {}), RANGE_START: ordered[0], RANGE_END: ordered[-1]}
    return dg.RunRequest(tags=tags, **kwargs)


@dg.sensor(
    job=incremental_update_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Launches one incremental_update_job run per batch of changes: new profile_history rows since the "
    "cursor (prag ingest) and new files in <home>/inbox/<task>/. Waits while any run is queued or in progress "
    "(one DuckDB writer).",
)
def profile_history_sensor(
    context: dg.SensorEvaluationContext, prag_settings: PragSettingsResource
) -> dg.SensorResult | dg.SkipReason:
    """Request one incremental update for everything that changed since the cursor."""
    import duckdb

    busy = context.instance.get_runs(filters=dg.RunsFilter(statuses=_BUSY), limit=1)
    if busy:
        return dg.SkipReason(f"run {busy[0].run_id} ({busy[0].job_name}) is in progress: checking again later")
    cursor = HistoryCursor.parse(context.cursor)
    try:
        changes = scan_changes(prag_settings.get(), cursor)
    except (duckdb.IOException, DuckDBBusyError) as exc:  # another process holds the DuckDB file for writing
        return dg.SkipReason(f"DuckDB file busy, checking again later: {exc}")
    for task, entries in changes.refused.items():
        context.log.warning(f"{task}: drop-folder entries refused (the run moves them to rejected/): {entries}")
    if not changes.tasks:
        reason = "no new history rows or drop-folder files"
        if changes.waiting:
            reason = f"pending history waits for the graph: {changes.waiting}"
        return dg.SensorResult(skip_reason=reason, cursor=changes.cursor.dump())
    n_users = sum(len(u) for u in changes.users.values())
    n_files = sum(len(f) for f in changes.files.values())
    key = hashlib.sha1(changes.cursor.dump().encode()).hexdigest()[:12]
    request = task_run_request(
        changes.tasks,
        run_key=f"history-{key}",
        tags={"prag/changed_users": str(n_users), "prag/inbox_files": str(n_files)},
    )
    # counts, not ids: the sensor's log is part of Dagster's records, which `prag forget` does not edit
    context.log.info(f"{n_users} changed users, {n_files} new files: one run for {changes.tasks}")
    return dg.SensorResult(run_requests=[request], cursor=changes.cursor.dump())


@dg.schedule(
    cron_schedule="0 3 * * 1",
    job=full_reclustering_job,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Weekly (Monday 03:00 UTC) full re-clustering of every configured task, with drift metadata "
    "(cluster_drift). Stopped by default: it renumbers clusters and makes downstream retrievals stale.",
)
def full_reclustering_schedule(
    context: dg.ScheduleEvaluationContext, prag_settings: PragSettingsResource
) -> dg.RunRequest | dg.SkipReason:
    """One run re-clustering all configured tasks."""
    tasks = [t for t in ALL_TASKS if t in prag_settings.get().data.tasks]
    if not tasks:
        return dg.SkipReason("no tasks configured (data.tasks)")
    stamp = context.scheduled_execution_time.strftime("%Y%m%dT%H%M") if context.scheduled_execution_time else "now"
    return task_run_request(tasks, run_key=f"recluster-{stamp}", tags={"prag/reason": "scheduled full re-clustering"})


jobs = [incremental_update_job, full_reclustering_job]
sensors = [profile_history_sensor]
schedules = [full_reclustering_schedule]
