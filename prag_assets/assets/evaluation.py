"""Stage 6: the LaMP evaluation table (task × method × metric) and a report across tasks."""

import base64
import os

import dagster as dg
import pandas as pd

from prag_assets.assets.generation import generations
from prag_assets.assets.retrieval_evaluation import lamp_retrieval_evaluation
from prag_assets.assets.utility import llm_utility
from prag_assets.builders.task_table import CODE_VERSION, stage_asset
from prag_assets.execution import TaskStep
from prag_assets.metadata import evaluation_table_metadata, frame_table
from prag_assets.partitions import DUCKDB_POOL, single_run
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.evaluation.llm import compare_with_baselines, evaluate_generations
from prag_models.evaluation.report import comparisons_markdown, primary_by_task, write_evaluation_report
from prag_models.evaluation.verdict import verdicts_for, verdicts_markdown
from prag_models.evaluation.verdict_view import DECIDING_HEADERS, deciding_markdown, deciding_rows, verdict_chart
from prag_models.storage.store import read_rows, replace_many

GROUP = "evaluation"


@stage_asset(
    GROUP, table="lamp_evaluation",
    deps=[generations],
    description="One row per (task, method, metric) with LaMP's official metric semantics, n and a 95 % bootstrap "
    "interval; table lamp_evaluation_comparisons holds each method's paired difference against random and "
    "dense_global (same transaction).",
)
def lamp_evaluation(step: TaskStep) -> dict:
    """Score one task's generations; its partition shows its primary metric, rows and comparisons."""
    gens = read_rows(step.con, "generations", {"task": step.task})
    frame, comparison = evaluate_generations(step.task, gens), compare_with_baselines(step.task, gens)
    where = {"task": step.task}
    replace_many(step.con, [("lamp_evaluation", frame, where), ("lamp_evaluation_comparisons", comparison, where)])
    step.shown.update({"primary_metric": frame_table(primary_by_task(frame)),
                       "table": evaluation_table_metadata(frame),
                       "comparisons": dg.MetadataValue.md(comparisons_markdown(comparison))})  # fmt: skip
    return {}


#: What the short verdict's columns say (prag_models/evaluation/verdict_view.py, docs/methods.md §6.5).
SHORT_DESCRIPTIONS = {
    "verdict": "ship: the gain's 95 % interval lies above 0 (over dense_global and over dense) and the "
    "randomisation test's p < 0.025; own profile suffices / personalization hurts / keep the baseline otherwise "
    "(docs/methods.md §6.5)",
    "method": "the best personalized method (reference methods excluded); \"folds: a / b\" where the two "
    "cross-fitting folds chose differently, without the prefix their names share (e.g. clusterrag_); names may wrap "
    "after an underscore (a zero-width space there): copy them from every_column, which has the full names",
    "gain [95 % CI]": "the evidence's metric, then the cross-fitted paired gain over dense_global (positive = better) "
    "with its 95 % interval",
    "n": "samples of the evidence",
    "LLM evidence": "the LLM evaluation of the same choice (a confirmation, decides nothing), with its n",
}


@dg.asset(
    group_name=GROUP,
    deps=[lamp_evaluation, lamp_retrieval_evaluation, llm_utility],
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    kinds={"duckdb"},
    code_version=CODE_VERSION,
    description="The answer first: the verdict's deciding columns per task (which method to ship, its gain over "
    "dense_global with a 95 % interval and n, what the LLM evaluation says), then every column of the verdict, the "
    "chart of that gain per task, then each method's primary metric ± interval per task (oracle_community as the "
    "reference ceiling); the long format stays in tables lamp_evaluation and lamp_retrieval_evaluation.",
)
def lamp_evaluation_report(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Summarise the evaluation across tasks: verdict (short, then every column), its chart, the compact table (markdown
    + PNGs under the prag home)."""
    settings = prag_settings.get()
    folder = settings.home_path / "reports"
    with duckdb.connect() as con:
        table, _, llm_chart = write_evaluation_report(con, settings.data.tasks, folder)
        verdicts = verdicts_for(con, settings)
    verdicts = verdicts[verdicts["task"].isin(list(settings.data.tasks))] if len(verdicts) else verdicts
    short = deciding_markdown(verdicts)
    (folder / "verdict.md").write_text(f"{short}\n\nEvery column:\n\n{verdicts_markdown(verdicts)}\n", encoding="utf-8")
    chart = verdict_chart(verdicts, folder / "verdict_gain.png")
    image = base64.b64encode(chart.read_bytes()).decode()
    context.log.info(f"verdict written to {folder / 'verdict.md'}, evaluation table to {folder / 'lamp_evaluation.md'}")
    home = settings.home_path
    return dg.MaterializeResult(
        metadata={  # in the order the UI shows them: the answer first, as a table the page shows inline (issue 50.4)
            "verdict": short_verdict_table(verdicts),
            # every column of the verdict as markdown (behind "Show Markdown"): a wide table entry would widen the
            # page's metadata column past the window, a long key its key column (reports/verdict.md holds both)
            "every_column": dg.MetadataValue.md(verdicts_markdown(verdicts)),
            "chart": dg.MetadataValue.md(f"![the verdict's gain over dense_global per task, 95 % interval, n]"
                                         f"(data:image/png;base64,{image})"),  # fmt: skip
            # markdown too: its method names and "task metric (n)" headers do not wrap, one column per task
            "primary_metric": dg.MetadataValue.md(primary_by_task(table).to_markdown(index=False)),
            # files under the prag home (`prag report` prints them; a browser cannot open a machine path)
            "files_in_home": dg.MetadataValue.text(", ".join(str(f.relative_to(home)) for f in (
                folder / "verdict.md", chart, folder / "lamp_evaluation.md", llm_chart))),  # fmt: skip
            "tasks": len(table["task"].unique()),
        }
    )


def short_verdict_table(verdicts: pd.DataFrame) -> dg.MetadataValue:
    """The verdict's deciding columns (task, verdict, method, gain with its interval, n, LLM evidence) as a Dagster
    table that fits the asset page's metadata box at 1,280 px with the navigation open: a fold disagreement names the
    methods without their shared prefix, and a method name may wrap after an underscore (a zero-width space)."""
    rows = [[*row[:2], _short_method(row[2]), *row[3:]] for row in deciding_rows(verdicts)]
    return frame_table(pd.DataFrame(rows, columns=DECIDING_HEADERS).astype(str), SHORT_DESCRIPTIONS)


#: Lets the browser wrap "clusterrag_collaborative" after its underscore (cells wrap at spaces and hyphens only).
WRAP = "\u200b"


def _short_method(cell: str) -> str:
    """A fold disagreement without the prefix its methods share up to an underscore ("folds: clusterrag_community /
    clusterrag_collaborative" -> "folds: community / collaborative"), then a break opportunity after underscores."""
    if cell.startswith("folds: "):
        names = cell.removeprefix("folds: ").split(" / ")
        shared = os.path.commonprefix(names)
        shared = shared[: shared.rfind("_") + 1] if len(names) > 1 else ""
        cell = "folds: " + " / ".join(n.removeprefix(shared) or n for n in names)
    return cell.replace("_", "_" + WRAP)
