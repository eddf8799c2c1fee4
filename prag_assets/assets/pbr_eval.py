"""Retrieval evaluation on real data (docs/methods.md §4.5): PBR, its ablations and the QE baselines on PersonaBench and
LongMemEval, as the unpartitioned asset group ``retrieval_eval`` (one ``dataset`` column in every table); the logic is
prag_models.stages.real_data_build.

The data never enter the project: the assets read ``data.real_data_dir`` (e.g. ``../shared/data``, or
``PRAG__DATA__REAL_DATA_DIR``). When it is empty every asset of the group logs why and yields nothing, so its
downstream steps and checks are skipped and the LaMP graph is unaffected; when it is set but holds none of the
configured ``pbr.datasets`` the assets fail with a message naming the folder. Each asset computes every dataset's rows
first and writes them in one transaction.
"""

import json

import dagster as dg
import pandas as pd

from prag_assets.builders.dataset_table import DatasetRun, dataset_asset, per_dataset
from prag_assets.builders.dataset_table import run_datasets as run_datasets  # the checks' datasets of a run
from prag_assets.execution import evidence_run
from prag_assets.metadata import frame_table, progress_logger
from prag_models.methods.pbr_report import retrieval_markdown
from prag_models.mlops.tuning_log import log_tuning
from prag_models.stages import real_data_build as build
from prag_models.stages.pbr_tuning import TABLE as TUNED_TABLE
from prag_models.stages.pbr_tuning import empty_rows, ensure_tuned_table
from prag_models.stages.real_data import ensure_table
from prag_models.storage.store import replace_many


def _corpora(run: DatasetRun) -> dict:
    """Load the real datasets into tables personal_segments and personal_questions."""
    writes, stats = [], {}
    for dataset in run.datasets:  # every file read and parsed before anything is written
        segments, questions, stats[dataset] = build.corpora_rows(run.settings, dataset)
        writes += [("personal_segments", segments, {"dataset": dataset}),
                   ("personal_questions", questions, {"dataset": dataset})]
        run.context.log.info(f"{dataset}: {stats[dataset]}")
    with run.duckdb.connect() as con:
        replace_many(con, writes)
    # counts only: no question is previewed in Dagster's records (docs/privacy.md)
    return {**per_dataset(stats), "root": str(build.real_data_root(run.settings))}


personal_corpora = dataset_asset(
    name="personal_corpora",
    table="personal_segments",
    description="Each person's (PersonaBench) or question's (LongMemEval) segments and the questions with gold "
    "segment ids and category, from data.real_data_dir (docs/methods.md §4.5).",
    run=_corpora,
)


def _segment_embeddings(run: DatasetRun) -> dict:
    """Embed the segments of every dataset (cached by content hash)."""
    stats = run.write_each("segment_embeddings", lambda con, dataset: build.segment_embedding_rows(
        con, dataset, run.settings, run.models.embedder, progress_logger(run.context, f"embedding {dataset} segments")))
    return {**per_dataset(stats), "newly_embedded": sum(s["newly_embedded"] for s in stats.values()),
            "embedder": run.settings.embedder.model}  # fmt: skip


segment_embeddings = dataset_asset(
    name="segment_embeddings",
    table="segment_embeddings",
    deps=[personal_corpora],
    kinds=("duckdb", "pytorch"),
    uses=("models",),
    description="Unit-norm embedding of every segment through embedding_cache (model id + content hash), shared with "
    "the LaMP graph.",
    run=_segment_embeddings,
)


def _expansions(run: DatasetRun) -> dict:
    """Write table query_expansions keyed by (dataset, q_id, method, source); generated texts via generation_cache."""
    qe_methods = build.qe_methods_to_run(run.settings, run.context.log.warning)
    gen: list = []

    def prepare(con) -> None:
        """The table, and the run's generator (loaded only when an expansion is generated)."""
        ensure_table(con, "query_expansions")
        gen.append(build.LazyGenerator(con, run.models.generator, run.settings.generator.batch_size,
                                       progress_logger(run.context, "expansion generation")))  # fmt: skip

    def rows(con, dataset: str):
        """One dataset's expansions."""
        frame, stats = build.expansion_rows(con, dataset, run.settings, run.models.embedder, gen[0], qe_methods,
                                            run.context.log.warning, evidence_run(run.context))  # fmt: skip
        run.context.log.info(f"{dataset}: {stats}")
        return frame, stats

    stats = run.write_each("query_expansions", rows, prepare)
    return {**per_dataset(stats), "generator": gen[0].model_id,
            "generated_now": sum(s["generated_now"] for s in stats.values())}  # fmt: skip


query_expansions = dataset_asset(
    name="query_expansions",
    table="query_expansions",
    deps=[segment_embeddings],
    uses=("models",),
    description="P-PRF pseudo utterances + reasoning (replayed from the PBR authors' PersonaBench file, or generated) "
    "and the QE baselines' expansions (generated only with pbr.expansion_source = generate or pbr.generate_qe); "
    "generations go through generation_cache.",
    run=_expansions,
)


def _tune(run: DatasetRun) -> dict:
    """Write table pbr_tuned_settings (dataset, fold, knob, value, default_value, train scores) for every dataset."""
    with run.duckdb.connect() as con:
        ensure_tuned_table(con)
        results = {d: build.pbr_tuning(con, d, run.settings, run.models.embedder) for d in run.datasets}
        replace_many(con, [(TUNED_TABLE, r.rows if r else empty_rows(), {"dataset": d}) for d, r in results.items()])
    stats = {}
    for dataset, result in results.items():
        if result is None:
            stats[dataset] = {"tuned": "no (PBR not evaluated, an expansion missing, or tuning.enabled = false)"}
            continue
        summary = {k: v for k, v in result.stats.items() if isinstance(v, float | int)}
        chosen = result.rows.assign(method="fold-" + result.rows["fold"])
        run_id = log_tuning(run.mlflow.target(), dataset, chosen, result.trials.assign(method="fold-" + result.trials[
            "fold"]), name="pbr-tuning", summary=summary)  # fmt: skip
        stats[dataset] = {**result.stats, "deployed": json.dumps(result.stats["deployed"]), "mlflow_run": run_id}
        run.context.log.info(f"{dataset}: PBR tuned on {result.stats['folds']} folds, held-out "
                             f"{result.stats['metric']} {result.stats['held_out_tuned']:.4f} vs the authors' "
                             f"{result.stats['held_out_default']:.4f}")  # fmt: skip
    return per_dataset(stats)


pbr_tuned_settings = dataset_asset(
    name="pbr_tuned_settings",
    table=TUNED_TABLE,
    deps=[query_expansions],
    kinds=("duckdb", "optuna"),
    uses=("models", "mlflow"),
    description="PBR's knobs (θ, k2 and the three fusion weights) tuned per dataset by an Optuna search, cross-fitted "
    "over folds of persons (of communities when several are pooled): each fold's questions are ranked with the "
    "values chosen on the other folds, so no question is scored by knobs chosen on it (docs/methods.md §4.7). Logged "
    "to MLflow (run pbr-tuning-<dataset>); fold 'all' holds the values for data not seen yet.",
    run=_tune,
)


def _rank(run: DatasetRun) -> dict:
    """Rank every question's segments with every method whose expansions are available."""
    return per_dataset(run.write_each("retrieval_runs", lambda con, dataset: build.retrieval_run_rows(
        con, dataset, run.settings, run.models.embedder, run.context.log.warning),
        lambda con: ensure_table(con, "retrieval_runs")))  # fmt: skip


retrieval_runs = dataset_asset(
    name="retrieval_runs",
    table="retrieval_runs",
    deps=[query_expansions, pbr_tuned_settings],
    uses=("models",),
    description="Per method and question, the top pbr.top_k segments of the asking user's own corpus (inner "
    "product, FAISS), docs/methods.md §4.3; pbr with the knobs tuned without the question's fold, pbr@default with "
    "the authors' settings (§4.7).",
    run=_rank,
)


def _score(run: DatasetRun) -> dict:
    """Score the rankings of retrieval_runs; markdown table in metadata and <home>/reports/retrieval_evaluation.md."""
    with run.duckdb.connect() as con:
        ensure_table(con, "retrieval_evaluation")
        frames = {dataset: build.evaluation_rows(con, dataset, run.settings) for dataset in run.datasets}
        replace_many(con, [("retrieval_evaluation", frame, {"dataset": d}) for d, frame in frames.items()])
    table = pd.concat(frames.values(), ignore_index=True)
    markdown = retrieval_markdown(table)
    report = run.settings.home_path / "reports" / "retrieval_evaluation.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(markdown + "\n", encoding="utf-8")
    run.context.log.info(f"retrieval evaluation: {len(table)} rows, table in {report}")
    return {"table": frame_table(table), "markdown": dg.MetadataValue.md(markdown),
            # under the prag home, as the report asset says its files (a browser cannot open a machine path)
            "file_in_home": dg.MetadataValue.text(str(report.relative_to(run.settings.home_path)))}  # fmt: skip


retrieval_evaluation = dataset_asset(
    name="retrieval_evaluation",
    table="retrieval_evaluation",
    deps=[retrieval_runs],
    description="R@K (PersonaBench best-combination recall, LongMemEval recall_any) and NDCG@K for K = 1, 3, 5, 10 "
    "per dataset, method and category, plus Overall.",
    run=_score,
)
