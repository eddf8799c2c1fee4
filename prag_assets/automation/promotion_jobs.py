"""Jobs `promote_cfrag_models` and `rollback_cfrag_models`: champion/challenger decisions launchable from the UI.

Run config (Launchpad)::

    ops:
      promote_cfrag_bundle:
        config: {task: LaMP-2, actor: alice, reason: "weekly retrain", override: false}

Each run records the decision in MLflow (aliases and ``promotion.*`` version tags, ``prag_models.mlops.promotion``) and
appends its rows to the DuckDB table ``model_promotions``; a refused promotion fails the run with the gate's message.
"""

import os
from functools import partial

import dagster as dg
from pydantic import Field

from prag_assets.partitions import DUCKDB_POOL
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_models.data.tasks import LampDataError, task_from_name
from prag_models.mlops.promotion import (
    REFUSED,
    PromotionDecision,
    append_decision,
    decision_metadata,
    promote,
    rollback,
)
from prag_models.stages.promotion_evidence import read_evidence


class RollbackConfig(dg.Config):
    """Which task's CFRAG bundle, who decides and why."""

    task: str = Field(description="LaMP task, e.g. LaMP-2")
    reason: str = Field(description="why (recorded on the model versions and in model_promotions)")
    actor: str = Field(default="", description="who decides; empty = the run's user tag, $USER, or 'unknown'")
    override: bool = Field(default=False, description="restore even versions the gate refuses (recorded, audited)")


class PromotionConfig(RollbackConfig):
    """Rollback's fields; the override also passes the metric gate."""

    override: bool = Field(default=False, description="promote even when the challenger is not better")


def _actor(context: dg.OpExecutionContext, configured: str) -> str:
    """The configured actor, else the run's `user` tag, else $USER, else 'unknown'."""
    return configured or context.run.tags.get("user") or os.environ.get("USER") or "unknown"


def _task(name: str) -> str:
    """The canonical task name (a Failure naming the known tasks otherwise)."""
    try:
        return task_from_name(name)
    except LampDataError as exc:
        raise dg.Failure(description=str(exc)) from None


def _record(context: dg.OpExecutionContext, duckdb: DuckDBResource, decision: PromotionDecision) -> dg.Output:
    """Append the decision to model_promotions, log it, and return it as the op's output (with metadata)."""
    with duckdb.connect() as con:
        append_decision(con, decision)
    context.log.info(decision.summary())
    return dg.Output(decision_metadata(decision), metadata=_shown(decision))


def _shown(decision: PromotionDecision) -> dict:
    """The run's metadata of a decision: the JSON record, the message and the figures the gate decided on."""
    shown = {"decision": dg.MetadataValue.json(decision_metadata(decision)), "message": decision.message}
    if decision.n_samples is not None:  # readable without opening the JSON
        shown |= {"evidence": decision.metric, "challenger_minus_champion": decision.difference,
                  "ci_95": f"[{decision.ci_low:+.4g}, {decision.ci_high:+.4g}]", "n_samples": decision.n_samples}
    return shown


@dg.op(pool=DUCKDB_POOL, description="Promote the challenger bundle of a task if the paired 95 % interval of "
       "challenger − champion lies on the better side of 0.")
def promote_cfrag_bundle(
    context: dg.OpExecutionContext, config: PromotionConfig, duckdb: DuckDBResource, mlflow: MlflowResource
) -> dg.Output:
    """Gate, promote or refuse, record; a refusal fails the run after it is recorded."""
    task = _task(config.task)
    try:  # a busy DuckDB file fails before any MLflow change; the gate reads the paired evidence there
        with duckdb.connect() as con:
            decision = promote(mlflow.target(), task, _actor(context, config.actor), config.reason, config.override,
                               partial(read_evidence, con, task))  # fmt: skip
    except LookupError as exc:
        raise dg.Failure(description=str(exc)) from None
    output = _record(context, duckdb, decision)
    if not decision.promoted:
        raise dg.Failure(description=f"promotion refused: {decision.message}", metadata=_shown(decision))
    return output


@dg.op(pool=DUCKDB_POOL, description="Give alias champion back to the versions before the task's last promotion.")
def rollback_cfrag_bundle(
    context: dg.OpExecutionContext, config: RollbackConfig, duckdb: DuckDBResource, mlflow: MlflowResource
) -> dg.Output:
    """Roll back and record; no promotion history fails the run."""
    task = _task(config.task)
    with duckdb.connect():
        pass
    try:
        decision = rollback(mlflow.target(), task, _actor(context, config.actor), config.reason, config.override)
    except LookupError as exc:
        raise dg.Failure(description=str(exc)) from None
    output = _record(context, duckdb, decision)
    if decision.action == REFUSED:
        raise dg.Failure(description=f"rollback refused: {decision.message}",
                         metadata={"decision": dg.MetadataValue.json(decision_metadata(decision))})
    return output


@dg.job(
    description="Champion/challenger gate for a task's CFRAG models: the challenger bundle becomes champion when the "
    "paired 95 % interval of challenger − champion over the same dev samples (cfrag_model_evaluation's evidence) "
    "lies on the better side of 0, or on override; refusals fail the run. "
    "Every decision goes to MLflow tags and table model_promotions.",
    tags={"prag/kind": "promotion"},
)
def promote_cfrag_models() -> None:
    """One op: promote_cfrag_bundle."""
    promote_cfrag_bundle()


@dg.job(
    description="Undo a task's last CFRAG promotion: alias champion returns to the previous champion versions.",
    tags={"prag/kind": "promotion"},
)
def rollback_cfrag_models() -> None:
    """One op: rollback_cfrag_bundle."""
    rollback_cfrag_bundle()


promotion_jobs = [promote_cfrag_models, rollback_cfrag_models]
