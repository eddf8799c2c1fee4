"""Stage 6: the LaMP evaluation table (task × method × metric) and a report across tasks."""

import base64

import dagster as dg
import pandas as pd

from prag_assets.assets.generation import generations
from prag_assets.common import evaluation_table_metadata, table_metadata, task_run
from prag_assets.partitions import DUCKDB_POOL, single_run
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_assets.task_table import CODE_VERSION, task_asset
from prag_models.evaluation.llm import EVALUATION_COLUMNS, compare_with_baselines, evaluate_generations
from prag_models.evaluation.report import comparisons_markdown, evaluation_markdown, write_evaluation_report
from prag_models.storage.store import read_rows, replace_many

GROUP = "evaluation"


@task_asset(
    GROUP,
    deps=[generations],
    kinds={"duckdb"},
    description="One row per (task, method, metric) with LaMP's official metric semantics, n and a 95 % bootstrap "
    "interval; table lamp_evaluation_comparisons holds each method's paired difference against random and "
    "dense_global (same transaction).",
)
def lamp_evaluation(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Score the generations of each task."""
    frames, comparisons = [], []
    with task_run(context, prag_settings, duckdb) as (_, con, tasks):
        for task in tasks:
            gens = read_rows(con, "generations", {"task": task})
            frame, comparison = evaluate_generations(task, gens), compare_with_baselines(task, gens)
            where = {"task": task}
            replace_many(con, [("lamp_evaluation", frame, where), ("lamp_evaluation_comparisons", comparison, where)])
            frames.append(frame)
            comparisons.append(comparison)
        written = table_metadata(con, "lamp_evaluation", tasks)
    table = pd.concat(frames) if frames else pd.DataFrame(columns=EVALUATION_COLUMNS)
    comparison = pd.concat(comparisons) if comparisons else pd.DataFrame()
    return dg.MaterializeResult(
        metadata={
            "table": evaluation_table_metadata(table),
            "markdown": dg.MetadataValue.md(evaluation_markdown(table)),
            "comparisons": dg.MetadataValue.md(comparisons_markdown(comparison)),
            **written,
        }
    )


@dg.asset(
    group_name=GROUP,
    deps=[lamp_evaluation],
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    kinds={"duckdb"},
    code_version=CODE_VERSION,
    description="The evaluation of every task as one markdown table and a bar chart of each task's primary metric.",
)
def lamp_evaluation_report(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Summarise the evaluation table across tasks (markdown + PNG chart under the prag home)."""
    settings = prag_settings.get()
    with duckdb.connect() as con:
        table, markdown, chart = write_evaluation_report(con, settings.data.tasks, settings.home_path / "reports")
    image = base64.b64encode(chart.read_bytes()).decode()
    context.log.info(f"evaluation table written to {chart.parent / 'lamp_evaluation.md'}")
    return dg.MaterializeResult(
        metadata={
            "table": evaluation_table_metadata(table),
            "markdown": dg.MetadataValue.md(markdown),
            "chart": dg.MetadataValue.md(f"![evaluation](data:image/png;base64,{image})"),
            "chart_path": dg.MetadataValue.path(str(chart)),
            "tasks": len(table["task"].unique()),
        }
    )
