"""Blocking check of the CFRAG promotion record: every kind's metrics recorded, in bounds, equal to the MLflow tags."""

import math

import dagster as dg
import pandas as pd

from prag_assets.assets.cfrag_promotion import cfrag_model_evaluation
from prag_assets.checks.per_task import CheckEvents, TaskOutcome, report, task_check
from prag_assets.execution import task_run
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.metrics.lamp import metric_bounds, primary_metric
from prag_models.mlops.promotion import BUNDLE_EVAL, KINDS, bundle_figure
from prag_models.mlops.registry import make_client
from prag_models.stages.cfrag_evaluation import EVAL_TABLE, METHOD
from prag_models.storage.store import read_rows, table_exists


def _task_problems(con, client, task: str) -> tuple[list[str], dict]:
    """Problems of one task's recorded evaluation: rows, bundle, primary metric, bounds, MLflow tags equal."""
    rows = read_rows(con, EVAL_TABLE, {"task": task}) if table_exists(con, EVAL_TABLE) else pd.DataFrame()
    if rows.empty:
        return [f"no rows in {EVAL_TABLE}"], {}
    problems = []
    kinds = set(rows["kind"])
    if kinds != set(KINDS):
        problems.append(f"recorded for {sorted(kinds)}, expected every kind {list(KINDS)}")
    if primary_metric(task) not in set(rows["metric"]):
        problems.append(f"primary metric {primary_metric(task)} not recorded")
    tags_of: dict[tuple[str, int], dict] = {}
    for r in rows.itertuples(index=False):
        low, high = metric_bounds(r.metric)
        if not (math.isfinite(r.value) and low <= r.value <= high):
            problems.append(f"{r.metric} = {r.value} outside [{low}, {high}]")
        key = (r.registered_name, int(r.version))
        if key not in tags_of:
            tags_of[key] = client.get_model_version(r.registered_name, str(r.version)).tags
        tagged = tags_of[key].get(f"{BUNDLE_EVAL}.{r.metric}")
        if tagged != bundle_figure(r.value):
            problems.append(f"{r.registered_name}/{r.version}: tag {BUNDLE_EVAL}.{r.metric} = {tagged}, table says "
                            f"{r.value}")  # fmt: skip
    info = {m: float(v) for m, v in rows.groupby("metric")["value"].first().items()}
    return sorted(set(problems)), info


@task_check(
    cfrag_model_evaluation,
    "recorded_metrics_in_bounds",
    "Every model kind of the bundle has the task's metrics recorded, the primary one included; each "
    "value is finite and within the metric's bounds ([0, 1], MAE/RMSE [0, 4]) and equals (to 4 significant "
    "digits) the eval.bundle.<metric> tag of "
    "its MLflow version. Tasks without `cfrag` in retrieval.methods are skipped, and so is a run whose budget "
    "deferred the generated outputs (run.generation_samples = 0).",
)
def recorded_metrics_in_bounds(
    context: dg.AssetCheckExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    mlflow: MlflowResource,
) -> CheckEvents:
    """Check the recorded evaluation of each task, reported per task."""
    outcomes: dict[str, TaskOutcome] = {}
    client = make_client(mlflow.target())
    with task_run(context, prag_settings, duckdb) as (settings, con, tasks):
        for task in tasks:
            if METHOD not in settings.retrieval.methods:
                outcomes[task] = TaskOutcome(metadata={"skipped": "cfrag is not in retrieval.methods"})
                continue
            if settings.run.generation_samples == 0:  # nothing generated, nothing recorded: no figure of n = 0
                outcomes[task] = TaskOutcome(metadata={"skipped": "the run's budget deferred the generated outputs "
                                                       "to `prag evidence` (run.generation_samples = 0)"})  # fmt: skip
                continue
            problems, info = _task_problems(con, client, task)
            outcomes[task] = TaskOutcome(errors=problems, metadata={"metrics": dg.MetadataValue.json(info)})
    yield from report(context, outcomes)


promotion_checks = [recorded_metrics_in_bounds]
