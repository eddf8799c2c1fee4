"""Stage 5b: the LLM's utility of the retrieved documents — the label-free comparison that decides or confirms each
task's verdict, with the LLM calls planned where they decide; the logic is prag_models.stages.llm_utility."""


from prag_assets.assets.cfrag import cfrag_retrievals
from prag_assets.assets.lamp_data import lamp_samples
from prag_assets.assets.pbr_lamp import pbr_lamp_retrievals
from prag_assets.assets.retrieval import baseline_retrievals, clusterrag_retrievals
from prag_assets.assets.retrieval_evaluation import lamp_retrieval_evaluation
from prag_assets.builders.task_table import stage_asset
from prag_assets.execution import TaskStep, evidence_run
from prag_assets.metadata import progress_logger
from prag_models.evaluation.utility import PLAN_TABLE, UTILITY_TABLE
from prag_models.stages.llm_utility import utility_rows
from prag_models.storage.store import replace_many

GROUP = "evaluation"


@stage_asset(
    GROUP, table=UTILITY_TABLE, uses=("models",),
    deps=[lamp_samples, baseline_retrievals, clusterrag_retrievals, cfrag_retrievals, pbr_lamp_retrievals,
          lamp_retrieval_evaluation],  # fmt: skip
    description="The LLM's utility of each method's retrieved documents: the gold output's mean log-likelihood per "
    "token under the generator, given the LaMP prompt the documents make (no generation). A pilot chooses the method "
    "where no labels do and sizes the test for 80 % power; the test compares the choice with dense_global and dense "
    "on fresh dev samples (table llm_utility_plans holds each task's plan). docs/methods.md §6.7.",
)
def llm_utility(step: TaskStep) -> dict:
    """Pilot, plan and test of one task's utility comparison, written in one transaction."""
    progress = progress_logger(step.context, f"{step.task} utility")
    frame, plan, stats = utility_rows(step.con, step.task, step.settings, step.models.generator(), progress,
                                      evidence_run(step.context))  # fmt: skip
    if "deferred" in stats:
        step.context.log.warning(f"{step.task}: LLM utility deferred to `prag evidence`: {stats['deferred']}")
    where = {"task": step.task}
    replace_many(step.con, [(UTILITY_TABLE, frame, where), (PLAN_TABLE, plan, where)])
    step.context.log.info(f"{step.task}: {len(frame)} utility values, {stats}")
    return stats
