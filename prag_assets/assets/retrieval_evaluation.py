"""Stage 6a: every LaMP retrieval path scored without an LLM (relevance metrics or label-hit, with intervals)."""

import json

import dagster as dg
import pandas as pd

from prag_assets.assets.cfrag import cfrag_retrievals
from prag_assets.assets.pbr_lamp import pbr_lamp_retrievals
from prag_assets.assets.retrieval import baseline_retrievals, clusterrag_retrievals
from prag_assets.common import run_tasks
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_models import retrieval_eval as rev
from prag_models.store import read_rows, replace_many, table_exists

GROUP = "evaluation"
RETRIEVAL_TABLES = ("baseline_retrievals", "clusterrag_retrievals", "cfrag_retrievals", "pbr_lamp_retrievals")


def load_runs(con, task: str) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Every retrieval row of a task, and per method the samples it ran on: those its table covers (a table runs all
    its methods on the same samples, so a sample a method returned nothing for still counts, as a miss), except the
    methods that run on the LLM-evaluation samples only."""
    frames, method_samples = [], {}
    for table in RETRIEVAL_TABLES:
        if not table_exists(con, table):
            continue
        frame = read_rows(con, table, {"task": task})
        samples = sorted(frame["sample_id"].astype(str).unique())
        method_samples |= {m: samples for m in frame["method"].unique()}
        for method in set(rev.LLM_SUBSET_METHODS) & set(frame["method"]):  # run on the LLM-evaluation samples only
            method_samples[method] = sorted(frame.loc[frame["method"] == method, "sample_id"].astype(str).unique())
        frames.append(frame)
    runs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["method", "sample_id"])
    runs["sample_id"] = runs["sample_id"].astype(str)
    return runs, method_samples


def load_truth(con, task: str) -> tuple[dict[str, set[str]] | None, dict[str, str] | None, dict[str, str]]:
    """Relevant docs per dev sample (None without relevance labels), doc labels (None for tasks without) and golds
    in the labels' terms (rev.document_label / rev.gold_label)."""
    samples = con.execute(
        "SELECT sample_id, input, gold FROM lamp_samples WHERE task = ? AND split = 'dev'", [task]
    ).fetchall()
    golds = {str(s): rev.gold_label(task, str(text), str(g)) for s, text, g in samples}
    relevant: dict[str, set[str]] | None = None
    if table_exists(con, "relevance_labels"):
        pairs = con.execute("SELECT sample_id, doc_id FROM relevance_labels WHERE task = ?", [task]).fetchall()
        if pairs:
            relevant = {}
            for sample, doc in pairs:
                relevant.setdefault(str(sample), set()).add(str(doc))
    labels = None
    if task in rev.LABEL_FIELDS:
        rows = con.execute("SELECT doc_id, fields_json FROM profile_documents WHERE task = ?", [task]).fetchall()
        labels = {str(d): rev.document_label(task, json.loads(f)) for d, f in rows}
    return relevant, labels, {s: g for s, g in golds.items() if g is not None}


@dg.asset(
    group_name=GROUP,
    deps=[baseline_retrievals, clusterrag_retrievals, cfrag_retrievals, pbr_lamp_retrievals],
    partitions_def=task_partitions,
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    kinds={"duckdb"},
    description="Every retrieval path scored with no LLM on every dev sample it ran on: R@k (capped), NDCG@k, MRR "
    "against the demo's relevance labels, label-hit@k for LaMP-1/2/3; n, 95 % bootstrap intervals and paired "
    "differences against random and dense_global.",
)
def lamp_retrieval_evaluation(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Score the retrieval tables of each task (tables lamp_retrieval_{evaluation,comparisons,sample_scores})."""
    settings = prag_settings.get()
    k = settings.retrieval.k
    summaries, comparisons, stats = [], [], {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            runs, method_samples = load_runs(con, task)
            relevant, labels, golds = load_truth(con, task)
            scores = rev.per_sample_scores(runs, method_samples, k, relevant, labels, golds)
            if scores.empty:
                context.log.warning(f"{task}: no relevance labels and no document labels: nothing to score")
                continue
            primary = rev.primary_retrieval_metric(relevant is not None, k)
            summary = rev.summarize(task, scores, primary)
            comparison = rev.compare(task, scores)
            where = {"task": task}
            replace_many(con, [("lamp_retrieval_sample_scores", scores.assign(task=task), where),
                               ("lamp_retrieval_evaluation", summary, where),
                               ("lamp_retrieval_comparisons", comparison, where)])  # fmt: skip
            summaries.append(summary)
            comparisons.append(comparison)
            best = summary[summary["metric"] == primary].sort_values("value", ascending=False).iloc[0]
            stats[task] = {"primary": primary, "methods": int(summary["method"].nunique()), "best": best["method"]}
    summary = pd.concat(summaries) if summaries else pd.DataFrame(columns=rev.SUMMARY_COLUMNS)
    comparison = pd.concat(comparisons) if comparisons else pd.DataFrame(columns=rev.COMPARISON_COLUMNS)
    markdown = rev.summary_markdown(summary, comparison)
    report = settings.home_path / "reports" / "lamp_retrieval_evaluation.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(markdown + "\n", encoding="utf-8")
    return dg.MaterializeResult(
        metadata={
            "per_task": dg.MetadataValue.json(stats),
            "table": dg.MetadataValue.md(markdown),
            "dagster/row_count": len(summary),
            "report_path": dg.MetadataValue.path(str(report)),
        }
    )
