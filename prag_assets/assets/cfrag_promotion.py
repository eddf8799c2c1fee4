"""CFRAG model evaluation for promotion: the `cfrag` rows of ``lamp_evaluation`` attached to the MLflow versions of the
bundle ``cfrag_retrievals`` used (the challengers), so ``prag promote`` can compare challenger and champion."""


import dagster as dg
import pandas as pd

from prag_assets.assets.cfrag import BUNDLE_TABLE, cfrag_retrievals
from prag_assets.assets.cfrag_users import GROUP
from prag_assets.assets.evaluation import lamp_evaluation
from prag_assets.common import run_tasks
from prag_assets.mlflow_resource import MlflowResource
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_models.metrics import primary_metric
from prag_models.promotion import KINDS, record_evaluation
from prag_models.registry import data_version
from prag_models.store import read_rows, replace_rows, table_exists

#: One row per (task, model kind, metric): the values recorded on the MLflow versions.
EVAL_TABLE = "cfrag_model_evaluations"
#: The evaluation method whose metrics gate promotion: full CFRAG.
METHOD = "cfrag"


def evaluation_data_version(con, task: str) -> tuple[str, str]:
    """(data version, generator ids) of a task's evaluation: a hash of the dev samples and the generator ids."""
    samples = con.execute(
        "SELECT sample_id, user_id, gold FROM lamp_samples WHERE task = ? AND split = 'dev' ORDER BY sample_id", [task]
    ).df()
    found = con.execute(
        "SELECT DISTINCT generator_id FROM generations WHERE task = ? AND method = ? ORDER BY 1", [task, METHOD]
    ).fetchall()
    generators = ",".join(g for (g,) in found)
    return data_version(samples, generators), generators


@dg.asset(
    deps=[lamp_evaluation, cfrag_retrievals],
    kinds={"duckdb", "mlflow"},
    description="The `cfrag` metrics of lamp_evaluation recorded on every MLflow version of the bundle "
    "cfrag_retrievals used (tags eval.<metric>, eval.data_version, eval.bundle; metrics eval.<metric> on the runs) "
    "and in table cfrag_model_evaluations: the input of the promotion gate (prag promote).",
    group_name=GROUP,
    partitions_def=task_partitions,
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
)
def cfrag_model_evaluation(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    mlflow: MlflowResource,
) -> dg.MaterializeResult:
    """Record the challenger bundle's evaluation on its model versions."""
    settings = prag_settings.get()
    stats: dict[str, dict] = {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            scores = read_rows(con, "lamp_evaluation", {"task": task, "method": METHOD})
            if scores.empty:
                if table_exists(con, EVAL_TABLE):
                    con.execute(f"DELETE FROM {EVAL_TABLE} WHERE task = ?", [task])
                stats[task] = {"skipped": f"no '{METHOD}' rows in lamp_evaluation (is it in retrieval.methods?)"}
                context.log.warning(f"{task}: {stats[task]['skipped']}: nothing recorded")
                continue
            bundle = read_rows(con, BUNDLE_TABLE, {"task": task})
            versions = {k: int(v) for k, v in zip(bundle["kind"], bundle["version"], strict=True)}
            if set(versions) != set(KINDS):
                raise LookupError(f"{task}: {BUNDLE_TABLE} lists {sorted(versions)}, expected {list(KINDS)}: "
                                  "re-materialize cfrag_retrievals")  # fmt: skip
            metrics = {m: float(v) for m, v in zip(scores["metric"], scores["value"], strict=True)}
            version, generators = evaluation_data_version(con, task)
            n_samples = str(int(scores["n_samples"].max()))
            extra = {"eval.method": METHOD, "eval.n_samples": n_samples, "eval.generator": generators}
            recorded = record_evaluation(mlflow.target(), task, versions, metrics, version, extra)
            now = pd.Timestamp.now(tz="UTC").tz_localize(None)
            frame = pd.DataFrame(
                [
                    (task, kind, name.rsplit("/", 1)[0], versions[kind], m, v, m == primary_metric(task), version, now)
                    for kind, name in recorded.items()
                    for m, v in metrics.items()
                ],
                columns=["task", "kind", "registered_name", "version", "metric", "value", "is_primary",
                         "data_version", "recorded_at"],
            )  # fmt: skip
            replace_rows(con, EVAL_TABLE, frame, {"task": task})
            stats[task] = {"versions": recorded, "metrics": metrics, "data_version": version, "n_samples": n_samples}
            context.log.info(f"{task}: recorded {metrics} on {list(recorded.values())}")
    return dg.MaterializeResult(metadata={"per_task": dg.MetadataValue.json(stats)})
