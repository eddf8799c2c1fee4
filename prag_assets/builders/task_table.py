"""One factory for the task-table skeleton: per task of the run, read, call one prag_models function, write, report.

Every asset built here is partitioned by task (one run covers a task range), takes a slot of the DuckDB pool, writes
each task's rows of its table in one transaction and reports, on each task partition, that task's
`dagster/row_count`, `dagster/column_schema` and statistics; its code version is derived in
prag_assets/builders/code_versions.py.
"""

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg
import pandas as pd
from dagster_ray import RayResource

from prag_assets.execution import TaskStep, fill_stage, task_run
from prag_assets.metadata import keyed_table, report_partitions, stats_metadata
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_assets.resources.models import ModelsResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.storage.store import replace_rows

#: The placeholder version; prag_assets/definitions.py derives each asset's own (prag_assets/builders/code_versions.py).
CODE_VERSION = "1"


#: (one task's step) -> (the task's rows of the table, the task's statistics for the metadata).
TaskBuild = Callable[[TaskStep], tuple[pd.DataFrame, dict[str, Any]]]


def task_asset(group: str, **kwargs: Any) -> Callable[..., dg.AssetsDefinition]:
    """`dg.asset` for a task-partitioned stage: one run per task range, a DuckDB pool slot, the code version."""
    kwargs.setdefault("code_version", CODE_VERSION)
    return dg.asset(
        group_name=group, partitions_def=task_partitions, backfill_policy=single_run, pool=DUCKDB_POOL, **kwargs
    )


def task_table_asset(
    *,
    name: str,
    group: str,
    deps: Sequence[Any],
    description: str,
    build: TaskBuild,
    kinds: Sequence[str] = ("duckdb",),
    code_version: str = CODE_VERSION,
    summary: Callable[[dict[str, dict]], dict[str, Any]] | None = None,
    fill: str | None = None,
) -> dg.AssetsDefinition:
    """A task-partitioned asset writing the table of its name from `build` per task (summary: extra metadata of
    one task partition, called with that task's statistics alone;
    fill: the prag_models.stages.cache_work stage whose caches are filled first — user-shard Parquet loaded, and
    on the Ray engine every missing item computed on the cluster)."""
    table = name

    @task_asset(group, name=name, deps=list(deps), kinds=set(kinds), code_version=code_version, description=description)
    def _asset(
        context: dg.AssetExecutionContext,
        prag_settings: PragSettingsResource,
        duckdb: DuckDBResource,
        models: ModelsResource,
        mlflow: MlflowResource,
        ray: RayResource,
    ) -> dg.MaterializeResult:
        stats: dict[str, dict] = {}
        filled: dict[str, Any] = {}
        with task_run(context, prag_settings, duckdb) as (settings, con, tasks):
            if fill:
                filled = fill_stage(context, con, fill, tasks, settings, models, ray)
            for task in tasks:
                frame, stats[task] = build(TaskStep(context, con, task, settings, models, mlflow))
                replace_rows(con, table, frame, {"task": task})
                context.log.info(f"{task}: {len(frame)} rows of {table}, {stats[task]}")
            extra = {task: stats_metadata(summary({task: stats[task]})) for task in stats} if summary else None
            report_partitions(context, con, table, stats, extra)
        # the cache fill is one step of the whole run (all its tasks): said so by its name
        return dg.MaterializeResult(metadata={"run_cache_fill": keyed_table({"run": filled}, "scope")} if fill else {})

    return _asset
