"""How the assets run a stage over the tasks of a run: which tasks the run covers, the engine of the heavy stages
(in-process, or the Ray cluster), the caches filled before a stage, and one step per task."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster_ray import RayResource

from prag_models.config.settings import Settings

if TYPE_CHECKING:
    from prag_assets.resources.mlflow_registry import MlflowResource
    from prag_assets.resources.models import ModelsResource
    from prag_models.compute.engines import Engine


@dataclass
class TaskStep:
    """What one task's build gets: the run's context, the open DuckDB connection, the task, settings, models, MLflow."""

    context: dg.AssetExecutionContext
    con: Any
    task: str
    settings: Settings
    models: ModelsResource
    mlflow: MlflowResource


def run_tasks(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext, settings: Settings) -> list[str]:
    """The tasks this run materializes: its partition keys that are also configured in data.tasks."""
    keys = list(context.partition_keys) if context.has_partition_key_range or context.has_partition_key else []
    keys = keys or list(settings.data.tasks)
    chosen = [k for k in keys if k in settings.data.tasks]
    skipped = [k for k in keys if k not in settings.data.tasks]
    if skipped:
        context.log.warning(f"tasks {skipped} are not in data.tasks {list(settings.data.tasks)}: skipped")
    return chosen


@contextmanager
def task_run(
    context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext, prag_settings: Any, duckdb: Any
) -> Iterator[tuple[Settings, Any, list[str]]]:
    """The run's settings, an open DuckDB connection (closed afterwards) and the tasks the run covers."""
    settings = prag_settings.get()
    tasks = run_tasks(context, settings)
    with duckdb.connect() as con:
        yield settings, con, tasks


def compute_engine(context: Any, settings: Settings, ray: RayResource) -> Engine | None:
    """The engine of the run's heavy stages: None for compute.engine = local (the stages compute in-process),
    a RayEngine on the connected cluster for ray."""
    if settings.compute.engine != "ray":
        return None
    from prag_models.compute.ray_engine import RayEngine

    if not ray.connected:
        ray.connect(context)
    return RayEngine(settings.compute)


def fill_stage(context: dg.AssetExecutionContext, con: Any, stage: str, tasks: list[str], settings: Settings,
               models: Any, ray: RayResource) -> dict[str, Any]:  # fmt: skip
    """Before a heavy stage: shards of user-shard runs loaded, and on Ray every missing item computed there."""
    from prag_models.stages.cache_work import fill_caches

    stats = fill_caches(con, stage, tasks, settings, models, compute_engine(context, settings, ray))
    context.log.info(f"{stage} caches before the stage: {stats}")
    return stats
