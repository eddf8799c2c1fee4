"""The factories of the task-partitioned assets: task_asset (the decorator every such asset shares), stage_asset (an
asset whose whole body is one stage run over the run's tasks: the decorated function is one task's step) and
task_table_asset (a stage writing the table of its name: the decorated function builds one task's rows).

Every asset built here is partitioned by task (one run covers a task range), takes a slot of the DuckDB pool, runs
its tasks through prag_assets.execution.run_stage and reports, on each task partition, that task's
`dagster/row_count`, `dagster/column_schema` and statistics; its code version is derived in
prag_assets/builders/code_versions.py.
"""

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg
import pandas as pd

from prag_assets.execution import Step, TaskStep, run_stage
from prag_assets.metadata import stats_metadata
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_models.storage.store import replace_rows

#: The placeholder version; prag_assets/definitions.py derives each asset's own (prag_assets/builders/code_versions.py).
CODE_VERSION = "1"


#: (one task's step) -> (the task's rows of the table, the task's statistics for the metadata).
TaskBuild = Callable[[TaskStep], tuple[pd.DataFrame, dict[str, Any]]]


def task_asset(group: str, **kwargs: Any) -> Callable[..., dg.AssetsDefinition]:
    """`dg.asset` for a task-partitioned stage: one run per task range, a DuckDB pool slot, the code version (kinds:
    duckdb unless given)."""
    kwargs.setdefault("code_version", CODE_VERSION)
    kwargs.setdefault("kinds", {"duckdb"})
    return dg.asset(
        group_name=group, partitions_def=task_partitions, backfill_policy=single_run, pool=DUCKDB_POOL, **kwargs
    )


def stage_asset(
    group: str,
    *,
    table: str,
    uses: Sequence[str] = (),
    fill: str | None = None,
    prepare: Callable[[Any], None] | None = None,
    about: Callable[[Any], dict[str, Any]] | None = None,
    **kwargs: Any,
) -> Callable[[Step], dg.AssetsDefinition]:
    """Decorator: the task-partitioned asset of the step's name that runs the step on every task of the run
    (run_stage) and reports each task partition's rows of `table` (uses: the resources the step needs beside
    settings and DuckDB — models, mlflow, ray; fill: the cache_work stage whose caches are filled first; prepare: run
    on the connection before the tasks; about: the run's own metadata, from the resources, before the stage runs;
    kwargs: task_asset's)."""

    def decorate(step: Step) -> dg.AssetsDefinition:
        @task_asset(group, name=step.__name__, required_resource_keys={"prag_settings", "duckdb", *uses}, **kwargs)
        def _asset(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
            resources = context.resources
            used = {key: getattr(resources, key) if key in uses else None for key in ("models", "mlflow", "ray")}
            settings, duckdb = resources.prag_settings.get(), resources.duckdb
            metadata = about(resources) if about else {}
            metadata |= run_stage(context, step, settings=settings, duckdb=duckdb, table=table, fill=fill,
                                  prepare=prepare, **used)  # fmt: skip
            return dg.MaterializeResult(metadata=metadata)

        return _asset

    return decorate


def task_table_asset(
    group: str,
    *,
    deps: Sequence[Any],
    description: str,
    kinds: Sequence[str] = ("duckdb",),
    summary: Callable[[dict[str, dict]], dict[str, Any]] | None = None,
    fill: str | None = None,
) -> Callable[[TaskBuild], dg.AssetsDefinition]:
    """Decorator: the task-partitioned asset writing the table of the build's name from the build per task (summary:
    extra metadata of one task partition, called with that task's statistics alone; fill: the
    prag_models.stages.cache_work stage whose caches are filled first — user-shard Parquet loaded, and on the Ray
    engine every missing item computed on the cluster)."""

    def decorate(build: TaskBuild) -> dg.AssetsDefinition:
        table = build.__name__

        def step(step: TaskStep) -> dict[str, Any]:
            """Build one task's rows, write them in one transaction, log."""
            frame, stats = build(step)
            replace_rows(step.con, table, frame, {"task": step.task})
            step.context.log.info(f"{step.task}: {len(frame)} rows of {table}, {stats}")
            if summary:
                step.shown.update(stats_metadata(summary({step.task: stats})))
            return stats

        step.__name__ = table
        return stage_asset(group, table=table, uses=("models", "mlflow", "ray"), fill=fill, deps=list(deps),
                           kinds=set(kinds), description=description)(step)  # fmt: skip

    return decorate
