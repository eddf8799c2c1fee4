"""Stage 5b: the LLM's utility of the retrieved documents — the label-free comparison that decides or confirms each
task's verdict, with the LLM calls planned where they decide; the logic is prag_models.stages.llm_utility."""

import dagster as dg

from prag_assets.assets.cfrag import cfrag_retrievals
from prag_assets.assets.lamp_data import lamp_samples
from prag_assets.assets.pbr_lamp import pbr_lamp_retrievals
from prag_assets.assets.retrieval import baseline_retrievals, clusterrag_retrievals
from prag_assets.assets.retrieval_evaluation import lamp_retrieval_evaluation
from prag_assets.builders.task_table import task_asset
from prag_assets.execution import task_run
from prag_assets.metadata import progress_logger, report_partitions
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.models import ModelsResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.evaluation.utility import PLAN_TABLE, UTILITY_TABLE
from prag_models.stages.llm_utility import utility_rows
from prag_models.storage.store import replace_many

GROUP = "evaluation"


@task_asset(
    GROUP,
    deps=[lamp_samples, baseline_retrievals, clusterrag_retrievals, cfrag_retrievals, pbr_lamp_retrievals,
          lamp_retrieval_evaluation],  # fmt: skip
    kinds={"duckdb"},
    description="The LLM's utility of each method's retrieved documents: the gold output's mean log-likelihood per "
    "token under the generator, given the LaMP prompt the documents make (no generation). A pilot chooses the method "
    "where no labels do and sizes the test for 80 % power; the test compares the choice with dense_global and dense "
    "on fresh dev samples (table llm_utility_plans holds each task's plan). docs/methods.md §6.7.",
)
def llm_utility(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> dg.MaterializeResult:
    """Pilot, plan and test of each task's utility comparison (each task partition shows its own plan)."""
    with task_run(context, prag_settings, duckdb) as (settings, con, tasks):
        stats = {}
        for task in tasks:
            progress = progress_logger(context, f"{task} utility")
            frame, plan, stats[task] = utility_rows(con, task, settings, models.generator(), progress)
            where = {"task": task}
            replace_many(con, [(UTILITY_TABLE, frame, where), (PLAN_TABLE, plan, where)])
            context.log.info(f"{task}: {len(frame)} utility values, {stats[task]}")
        report_partitions(context, con, UTILITY_TABLE, stats)
    return dg.MaterializeResult()
