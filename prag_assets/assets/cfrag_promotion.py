"""CFRAG model evaluation for promotion: the `cfrag` rows of ``lamp_evaluation`` attached to the MLflow versions of the
bundle ``cfrag_retrievals`` used (the challengers), so ``prag promote`` can compare challenger and champion."""

import dagster as dg

from prag_assets.assets.cfrag import cfrag_retrievals
from prag_assets.assets.evaluation import lamp_evaluation
from prag_assets.assets.retrieval_evaluation import lamp_retrieval_evaluation
from prag_assets.assets.utility import llm_utility
from prag_assets.builders.task_table import task_asset
from prag_assets.execution import task_run
from prag_assets.metadata import report_partitions
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.stages.cfrag_evaluation import EVAL_TABLE, record_task_evaluation


@task_asset(
    "evaluation",  # after lamp_evaluation: drawn with the evaluation group, so the cfrag group precedes generation
    deps=[lamp_evaluation, lamp_retrieval_evaluation, cfrag_retrievals, llm_utility],
    kinds={"duckdb", "mlflow"},
    description="The `cfrag` metrics of lamp_evaluation recorded on every MLflow version of the bundle "
    "cfrag_retrievals used, labelled as the bundle's (tags eval.bundle.<metric> to 4 significant digits with "
    "eval.bundle.n_samples, eval.data_version, eval.bundle; metrics eval.bundle.<metric> on the runs) and in table "
    "cfrag_model_evaluations; and the paired per-sample values of challenger and champion (cfrag vs cfrag@champion: "
    "the retrieval evaluation on every dev sample, the LLM utility on the samples planned for it, the LLM evaluation "
    "where both were generated) in table "
    "cfrag_promotion_evidence: the input of the promotion gate (prag promote).",
)
def cfrag_model_evaluation(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    mlflow: MlflowResource,
) -> dg.MaterializeResult:
    """Record the challenger bundle's evaluation on its model versions."""
    stats: dict[str, dict] = {}
    with task_run(context, prag_settings, duckdb) as (settings, con, tasks):
        for task in tasks:
            stats[task] = record_task_evaluation(con, task, mlflow.target(), settings)
            if "skipped" in stats[task]:
                context.log.warning(f"{task}: {stats[task]['skipped']}: nothing recorded")
                continue
            context.log.info(f"{task}: recorded {stats[task]['metrics']} on {list(stats[task]['versions'].values())}")
        report_partitions(context, con, EVAL_TABLE, stats)
    return dg.MaterializeResult()
