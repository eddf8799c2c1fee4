"""Partitioned checks report one evaluation per task partition, so a range run shows each task passed or failed.

`prag materialize` runs the task range as one run (backfill_policy single_run). An `AssetCheckResult` returned from
such a run carries no partition, and the UI then shows every task's check as planned but never evaluated ("Skipped").
Dagster records a check per partition from `AssetCheckEvaluation(partition=...)` events; a check op may yield
several of them, followed by its output so that downstream steps that wait on the blocking check can start. A failed
blocking evaluation of ERROR severity still fails the step (and so stops everything downstream).
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

# The pointer to the checked materialization; Dagster fills it for AssetCheckResult, we fill it per partition.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

CheckEvents = Iterator[dg.AssetCheckEvaluation | dg.Output]


@dataclass
class TaskOutcome:
    """What a check found on one task: errors (fail, ERROR severity), warnings (fail, WARN) and measurements."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


def _target(
    context: dg.AssetCheckExecutionContext, asset_key: dg.AssetKey, partition: str | None
) -> AssetCheckEvaluationTargetMaterializationData | None:
    """The latest materialization of the checked asset's partition (None when it was never materialized)."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition] if partition else None), limit=1
    ).records
    if not records:
        return None
    mat = records[0]
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=mat.storage_id, run_id=mat.event_log_entry.run_id, timestamp=mat.timestamp
    )


def _failures_md(outcome: TaskOutcome) -> dg.MetadataValue:
    lines = [f"- {e}" for e in outcome.errors] + [f"- (warning) {w}" for w in outcome.warnings]
    return dg.MetadataValue.md("\n".join(lines) or "none")


def evaluation(context: dg.AssetCheckExecutionContext, task: str, outcome: TaskOutcome) -> dg.AssetCheckEvaluation:
    """The check's evaluation on one task partition (unpartitioned when the check itself is)."""
    spec = next(iter(context.check_specs))
    partition = task if spec.partitions_def is not None else None
    for e in outcome.errors:
        context.log.error(f"{spec.key.to_user_string()} failed on {task}: {e}")
    for w in outcome.warnings:
        context.log.warning(f"{spec.key.to_user_string()} warns on {task}: {w}")
    return dg.AssetCheckEvaluation(
        asset_key=spec.asset_key,
        check_name=spec.name,
        passed=not outcome.errors and not outcome.warnings,
        severity=dg.AssetCheckSeverity.ERROR if outcome.errors or not outcome.warnings else dg.AssetCheckSeverity.WARN,
        blocking=spec.blocking,
        partition=partition,
        target_materialization_data=_target(context, spec.asset_key, partition),
        metadata={"task": task, **outcome.metadata, "failures": _failures_md(outcome)},
    )


def report(context: dg.AssetCheckExecutionContext, outcomes: Mapping[str, TaskOutcome]) -> CheckEvents:
    """One evaluation per task partition of the run, then the check's output (what blocked steps wait for)."""
    for task, outcome in outcomes.items():
        yield evaluation(context, task, outcome)
    yield dg.Output(None, output_name=context.op_def.output_defs[0].name)


def task_check(asset: Any, name: str, description: str, blocking: bool = True) -> Any:
    """`dg.asset_check` for a check of a task-partitioned asset (a DuckDB pool slot; blocking unless told)."""
    from prag_assets.partitions import DUCKDB_POOL, task_partitions

    return dg.asset_check(
        asset=asset,
        name=name,
        description=description,
        blocking=blocking,
        partitions_def=task_partitions,
        pool=DUCKDB_POOL,
    )
