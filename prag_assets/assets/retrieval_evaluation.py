"""Stage 6a: every LaMP retrieval path scored without an LLM (relevance metrics or label-hit, with intervals)."""

import dagster as dg
import pandas as pd

from prag_assets.assets.cfrag import cfrag_retrievals
from prag_assets.assets.pbr_lamp import pbr_lamp_retrievals
from prag_assets.assets.retrieval import baseline_retrievals, clusterrag_retrievals
from prag_assets.builders.task_table import task_asset
from prag_assets.execution import TaskStep, run_stage
from prag_assets.metadata import evaluation_table_metadata, frame_table
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.evaluation import retrieval as rev
from prag_models.evaluation.report import primary_by_task
from prag_models.evaluation.verdict_view import gain_numbers
from prag_models.stages.retrieval_evaluation import empty_tables, retrieval_evaluation_tables
from prag_models.storage.store import replace_many

GROUP = "evaluation"


@task_asset(
    GROUP,
    deps=[baseline_retrievals, clusterrag_retrievals, cfrag_retrievals, pbr_lamp_retrievals],
    description="Every retrieval path scored with no LLM on every dev sample it ran on: R@k (capped), NDCG@k, MRR "
    "against the demo's relevance labels, label-hit@k for LaMP-1/2/3; n, 95 % bootstrap intervals and paired "
    "differences against random and dense_global.",
)
def lamp_retrieval_evaluation(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Score the retrieval tables of each task (tables lamp_retrieval_{evaluation,comparisons,sample_scores})."""
    settings = prag_settings.get()
    summaries, comparisons = [], []

    def score(step: TaskStep) -> dict | None:
        """Score one task's retrievals (nothing without labels); its partition shows its tables."""
        scored, task_stats = retrieval_evaluation_tables(step.con, step.task, settings.retrieval.k)
        scores, summary, comparison = scored or empty_tables()
        where = {"task": step.task}
        replace_many(step.con, [("lamp_retrieval_sample_scores", scores, where),
                                ("lamp_retrieval_evaluation", summary, where),
                                ("lamp_retrieval_comparisons", comparison, where)])  # fmt: skip
        if scored is None:  # the tables exist with no rows for the task: its LLM utility decides it
            context.log.warning(f"{step.task}: no relevance labels and no document labels: nothing to score")
            return None
        summaries.append(summary)
        comparisons.append(comparison)
        step.shown.update({"primary_metric": frame_table(primary_by_task(summary)),
                           "table": evaluation_table_metadata(summary),
                           "markdown": dg.MetadataValue.md(rev.summary_markdown(summary, comparison))})  # fmt: skip
        # numbers, so that the asset's Plots tab charts the verdict's gain and interval across the task partitions
        gain = gain_numbers(step.con, settings, step.task)
        step.shown.update({key: dg.MetadataValue.float(value) for key, value in gain.items()})
        return task_stats

    run_stage(context, score, settings=settings, duckdb=duckdb, table="lamp_retrieval_evaluation")
    summary = pd.concat(summaries) if summaries else pd.DataFrame(columns=rev.SUMMARY_COLUMNS)
    comparison = pd.concat(comparisons) if comparisons else pd.DataFrame(columns=rev.COMPARISON_COLUMNS)
    report = settings.home_path / "reports" / "lamp_retrieval_evaluation.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(rev.summary_markdown(summary, comparison) + "\n", encoding="utf-8")
    # under the prag home, as the report asset says its files (a browser cannot open a machine path)
    in_home = str(report.relative_to(settings.home_path))
    return dg.MaterializeResult(metadata={"file_in_home": dg.MetadataValue.text(in_home)})
