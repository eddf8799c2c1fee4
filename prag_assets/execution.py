"""How the assets run a stage over the tasks of a run (run_stage): which tasks the run covers, the engine of the heavy
stages (in-process, or the Ray cluster) that fills their caches first, one step per task in one DuckDB connection, and
each task partition's metadata. A user-shard run fills its shard's caches on the same engine (fill_user_shard)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster_ray import RayResource

from prag_assets.metadata import keyed_table, report_partitions
from prag_models.config.settings import Settings

if TYPE_CHECKING:
    from prag_assets.resources.mlflow_registry import MlflowResource
    from prag_assets.resources.models import ModelsResource
    from prag_models.compute.engines import Engine


#: The run tag saying which budget a run's LLM stages spend: the LLM evidence run's (run.evidence_budget_s, `prag
#: evidence`, jobs prag_llm_evidence*) or, without it, the main job's (issue 47).
PHASE_TAG, EVIDENCE_PHASE = "prag/phase", "llm_evidence"


def evidence_run(context: dg.AssetExecutionContext) -> bool:
    """Whether this run is the LLM evidence that continues the main job (its tag says so)."""
    return context.run.tags.get(PHASE_TAG) == EVIDENCE_PHASE


@dataclass
class TaskStep:
    """What one task's build gets: the run's context, the open DuckDB connection, the task, settings, models, MLflow;
    `shown`: extra metadata entries of the task's partition the step adds beside its statistics."""

    context: dg.AssetExecutionContext
    con: Any
    task: str
    settings: Settings
    models: ModelsResource
    mlflow: MlflowResource
    shown: dict[str, Any] = field(default_factory=dict)


#: One task's step: its statistics (its partition's metadata), or None when the task has nothing to report.
Step = Callable[[TaskStep], Mapping[str, Any] | None]


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


def _fill_stage(context: dg.AssetExecutionContext, con: Any, stage: str, tasks: list[str], settings: Settings,
               models: Any, ray: RayResource) -> dict[str, Any]:  # fmt: skip
    """Before a heavy stage: shards of user-shard runs loaded, and on Ray every missing item computed there."""
    from prag_models.stages.cache_work import fill_caches

    stats = fill_caches(con, stage, tasks, settings, models, compute_engine(context, settings, ray))
    context.log.info(f"{stage} caches before the stage: {stats}")
    return stats


def run_stage(
    context: dg.AssetExecutionContext,
    step: Step,
    *,
    settings: Settings,
    duckdb: Any,
    table: str | None,
    models: Any = None,
    mlflow: Any = None,
    ray: RayResource | None = None,
    fill: str | None = None,
    prepare: Callable[[Any], None] | None = None,
    finish: Callable[[Any, dict[str, dict[str, Any]]], None] | None = None,
) -> dict[str, Any]:
    """Run one stage over the tasks of the run in one DuckDB connection: fill the caches of the prag_models.stages.
    cache_work stage `fill` first (user-shard Parquet loaded; on Ray every missing item computed there), then
    prepare(con), `step` once per task, finish(con, each reported task's extra metadata) and each task partition's
    own metadata (its rows of `table`, its statistics, its extra entries). Returns the run's metadata: the cache fill
    (`run_cache_fill`, a step of the whole run) when there was one."""
    tasks = run_tasks(context, settings)
    stats: dict[str, Mapping[str, Any]] = {}
    shown: dict[str, dict[str, Any]] = {}
    with duckdb.connect() as con:
        filled = _fill_stage(context, con, fill, tasks, settings, models, ray) if fill else None
        if prepare is not None:
            prepare(con)
        for task in tasks:
            task_step = TaskStep(context, con, task, settings, models, mlflow)
            result = step(task_step)
            if result is not None:
                stats[task], shown[task] = result, task_step.shown
        if finish is not None:
            finish(con, shown)
        report_partitions(context, con, table, stats, shown)
    return {"run_cache_fill": keyed_table({"run": filled}, "scope")} if fill else {}


def fill_user_shard(
    context: dg.AssetExecutionContext,
    duckdb: Any,
    stages: tuple[str, ...],
    task: str,
    shard: tuple[int, int],
    settings: Settings,
    models: Any,
    ray: RayResource,
) -> dict[str, Any]:
    """A user-shard run: the cache misses of each stage for one task's shard (i, n), computed on the run's engine (the
    Ray cluster, else in-process with the run's models) and left as finished Parquet folders, on a read-only DuckDB
    connection. Returns the engine's name, the shard's users, which file was read and each stage's statistics."""
    from prag_models.compute.engines import LocalEngine
    from prag_models.stages.cache_work import fill_caches, shard_users

    engine = compute_engine(context, settings, ray) or LocalEngine(
        lambda work: models.embedder() if work.kind == "embed" else models.generator()
    )
    with duckdb.read_connection() as (con, source):
        users = shard_users(con, task, shard)
        stats = {s: fill_caches(con, s, [task], settings, models, engine, shard, load=False) for s in stages}
    return {"engine": engine.name, "users": users, "source": source, "stats": stats}
