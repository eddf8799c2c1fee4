"""CFRAG model evaluation for promotion: the `cfrag` rows of ``lamp_evaluation`` attached to the MLflow versions of the
bundle ``cfrag_retrievals`` used (the challengers), so ``prag promote`` can compare challenger and champion."""


from prag_assets.assets.cfrag import cfrag_retrievals
from prag_assets.assets.evaluation import lamp_evaluation
from prag_assets.assets.retrieval_evaluation import lamp_retrieval_evaluation
from prag_assets.assets.utility import llm_utility
from prag_assets.builders.task_table import stage_asset
from prag_assets.execution import TaskStep
from prag_models.stages.cfrag_evaluation import EVAL_TABLE, record_task_evaluation


@stage_asset(
    "evaluation",  # after lamp_evaluation: drawn with the evaluation group, so the cfrag group precedes generation
    table=EVAL_TABLE,
    uses=("mlflow",),
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
def cfrag_model_evaluation(step: TaskStep) -> dict:
    """Record one task's challenger bundle evaluation on its model versions."""
    stats = record_task_evaluation(step.con, step.task, step.mlflow.target(), step.settings)
    if "skipped" in stats:
        step.context.log.warning(f"{step.task}: {stats['skipped']}: nothing recorded")
    elif "versions" in stats:
        step.context.log.info(f"{step.task}: recorded {stats['metrics']} on {list(stats['versions'].values())}")
    else:  # the run's budget deferred the generated outputs: the gate's evidence only
        step.context.log.info(f"{step.task}: metrics {stats['metrics']}; {stats['promotion_evidence']}")
    return stats
