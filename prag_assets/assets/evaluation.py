"""Stage 6: the LaMP evaluation table (task × method × metric) and a report across tasks."""

import base64

import dagster as dg
import pandas as pd

from prag_assets.assets.generation import generations
from prag_assets.common import run_tasks
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_models.metrics import lamp_metrics, primary_metric
from prag_models.report import evaluation_chart, evaluation_markdown
from prag_models.store import read_rows, replace_rows, table_exists

GROUP = "evaluation"


def evaluate_task(task: str, gens: pd.DataFrame) -> pd.DataFrame:
    """Official LaMP metrics of every method's predictions for one task."""
    rows = []
    for method, group in gens.groupby("method"):
        for metric, value in lamp_metrics(task, group["prediction"].tolist(), group["gold"].tolist()).items():
            rows.append((task, method, metric, float(value), len(group), metric == primary_metric(task)))
    return pd.DataFrame(rows, columns=["task", "method", "metric", "value", "n_samples", "is_primary"])


@dg.asset(
    group_name=GROUP,
    deps=[generations],
    partitions_def=task_partitions,
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    kinds={"duckdb"},
    description="One row per (task, method, metric) with LaMP's official metric semantics.",
)
def lamp_evaluation(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Score the generations of each task."""
    settings = prag_settings.get()
    frames = []
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            frame = evaluate_task(task, read_rows(con, "generations", {"task": task}))
            replace_rows(con, "lamp_evaluation", frame, {"task": task})
            frames.append(frame)
    table = pd.concat(frames) if frames else pd.DataFrame()
    return dg.MaterializeResult(metadata={"table": dg.MetadataValue.md(evaluation_markdown(table))})


@dg.asset(
    group_name=GROUP,
    deps=[lamp_evaluation],
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    kinds={"duckdb"},
    description="The evaluation of every task as one markdown table and a bar chart of each task's primary metric.",
)
def lamp_evaluation_report(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Summarise the evaluation table across tasks (markdown + PNG chart under the prag home)."""
    settings = prag_settings.get()
    with duckdb.connect() as con:
        if not table_exists(con, "lamp_evaluation"):
            raise LookupError("table lamp_evaluation is empty: materialize lamp_evaluation first")
        table = con.execute("SELECT * FROM lamp_evaluation ORDER BY task, method, metric").df()
    table = table[table["task"].isin(settings.data.tasks)]
    markdown = evaluation_markdown(table)
    chart = evaluation_chart(table, settings.home_path / "reports" / "lamp_evaluation.png")
    (chart.parent / "lamp_evaluation.md").write_text(markdown + "\n", encoding="utf-8")
    image = base64.b64encode(chart.read_bytes()).decode()
    context.log.info("\n" + markdown)
    return dg.MaterializeResult(
        metadata={
            "table": dg.MetadataValue.md(markdown),
            "chart": dg.MetadataValue.md(f"![evaluation](data:image/png;base64,{image})"),
            "chart_path": dg.MetadataValue.path(str(chart)),
            "tasks": len(table["task"].unique()),
        }
    )
