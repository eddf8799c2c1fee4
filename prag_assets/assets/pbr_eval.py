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
from collections.abc import Iterator

import dagster as dg
import pandas as pd

from prag_assets.builders.task_table import CODE_VERSION
from prag_assets.metadata import frame_table, keyed_table, preview, progress_logger, table_metadata
from prag_assets.partitions import DUCKDB_POOL, single_run
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_assets.resources.models import ModelsResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import Settings
from prag_models.methods.pbr_report import retrieval_markdown
from prag_models.mlops.tuning_log import log_tuning
from prag_models.stages import real_data_build as build
from prag_models.stages.pbr_tuning import TABLE as TUNED_TABLE
from prag_models.stages.pbr_tuning import empty_rows, ensure_tuned_table
from prag_models.stages.real_data import ensure_table
from prag_models.storage.store import replace_many

GROUP = "retrieval_eval"
_COMMON = dict(group_name=GROUP, backfill_policy=single_run, pool=DUCKDB_POOL, output_required=False,
               code_version=CODE_VERSION)


def run_datasets(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext, settings: Settings) -> list[str]:
    """Configured datasets found under data.real_data_dir; [] (logged) when it is not set; ValueError if none."""
    return build.configured_datasets(settings, context.log.warning)


def _written(duckdb: DuckDBResource, table: str) -> dict[str, dg.MetadataValue]:
    """Row count and column schema of a retrieval_eval table (every dataset)."""
    with duckdb.connect() as con:
        return table_metadata(con, table, None)


@dg.asset(kinds={"duckdb"}, description="Each person's (PersonaBench) or question's (LongMemEval) segments and the "
          "questions with gold segment ids and category, from data.real_data_dir (docs/methods.md §4.5).", **_COMMON)
def personal_corpora(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> Iterator[dg.MaterializeResult]:
    """Load the real datasets into tables personal_segments and personal_questions."""
    settings = prag_settings.get()
    datasets = run_datasets(context, settings)
    if not datasets:  # not configured: no materialization, downstream steps skip
        return
    writes, stats, questions = [], {}, pd.DataFrame()
    for dataset in datasets:  # every file read and parsed before anything is written
        segments, questions, stats[dataset] = build.corpora_rows(settings, dataset)
        writes += [("personal_segments", segments, {"dataset": dataset}),
                   ("personal_questions", questions, {"dataset": dataset})]
        context.log.info(f"{dataset}: {stats[dataset]}")
    with duckdb.connect() as con:
        replace_many(con, writes)
    yield dg.MaterializeResult(metadata={**_written(duckdb, "personal_segments"),
                                         "per_dataset": keyed_table(stats, "dataset"),
                                         "root": str(build.real_data_root(settings)),
                                         "questions_preview": preview(questions.drop(columns="gold_json"))})


@dg.asset(deps=[personal_corpora], kinds={"duckdb", "pytorch"}, description="Unit-norm embedding of every segment "
          "through embedding_cache (model id + content hash), shared with the LaMP graph.", **_COMMON)
def segment_embeddings(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> Iterator[dg.MaterializeResult]:
    """Embed the segments of every dataset (cached by content hash)."""
    settings = prag_settings.get()
    datasets = run_datasets(context, settings)
    if not datasets:  # not configured: no materialization, downstream steps skip
        return
    writes, stats = [], {}
    with duckdb.connect() as con:
        for dataset in datasets:
            progress = progress_logger(context, f"embedding {dataset} segments")
            frame, stats[dataset] = build.segment_embedding_rows(con, dataset, settings, models.embedder, progress)
            writes.append(("segment_embeddings", frame, {"dataset": dataset}))
        replace_many(con, writes)
    yield dg.MaterializeResult(metadata={**_written(duckdb, "segment_embeddings"),
                                         "per_dataset": keyed_table(stats, "dataset"),
                                         "newly_embedded": sum(s["newly_embedded"] for s in stats.values()),
                                         "embedder": settings.embedder.model})


@dg.asset(deps=[segment_embeddings], kinds={"duckdb"}, description="P-PRF pseudo utterances + reasoning (replayed "
          "from the PBR authors' PersonaBench file, or generated) and the QE baselines' expansions (generated only "
          "with pbr.expansion_source = generate or pbr.generate_qe); generations go through generation_cache.",
          **_COMMON)
def query_expansions(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> Iterator[dg.MaterializeResult]:
    """Write table query_expansions keyed by (dataset, q_id, method, source); generated texts via generation_cache."""
    settings = prag_settings.get()
    datasets = run_datasets(context, settings)
    if not datasets:  # not configured: no materialization, downstream steps skip
        return
    qe_methods = build.qe_methods_to_run(settings, context.log.warning)
    writes, stats = [], {}
    with duckdb.connect() as con:
        ensure_table(con, "query_expansions")
        gen = build.LazyGenerator(con, models.generator, settings.generator.batch_size,
                                  progress_logger(context, "expansion generation"))
        for dataset in datasets:
            frame, stats[dataset] = build.expansion_rows(con, dataset, settings, models.embedder, gen, qe_methods,
                                                         context.log.warning)
            writes.append(("query_expansions", frame, {"dataset": dataset}))
            context.log.info(f"{dataset}: {stats[dataset]}")
        replace_many(con, writes)
    yield dg.MaterializeResult(metadata={**_written(duckdb, "query_expansions"),
                                         "per_dataset": keyed_table(stats, "dataset"), "generator": gen.model_id,
                                         "generated_now": sum(s["generated_now"] for s in stats.values())})


@dg.asset(deps=[query_expansions], kinds={"duckdb", "optuna"}, description="PBR's knobs (θ, k2 and the three fusion "
          "weights) tuned per dataset by an Optuna search, cross-fitted over folds of persons (of communities when "
          "several are pooled): each fold's questions are ranked with the values chosen on the other folds, so no "
          "question is scored by knobs chosen on it (docs/methods.md §4.7). Logged to MLflow (run "
          "pbr-tuning-<dataset>); fold 'all' holds the values for data not seen yet.", **_COMMON)
def pbr_tuned_settings(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
    mlflow: MlflowResource,
) -> Iterator[dg.MaterializeResult]:
    """Write table pbr_tuned_settings (dataset, fold, knob, value, default_value, train scores) for every dataset."""
    settings = prag_settings.get()
    datasets = run_datasets(context, settings)
    if not datasets:  # not configured: no materialization, downstream steps skip
        return
    with duckdb.connect() as con:
        ensure_tuned_table(con)
        results = {d: build.pbr_tuning(con, d, settings, models.embedder) for d in datasets}
        replace_many(con, [(TUNED_TABLE, r.rows if r else empty_rows(), {"dataset": d}) for d, r in results.items()])
    stats = {}
    for dataset, result in results.items():
        if result is None:
            stats[dataset] = {"tuned": "no (PBR not evaluated, an expansion missing, or tuning.enabled = false)"}
            continue
        summary = {k: v for k, v in result.stats.items() if isinstance(v, float | int)}
        chosen = result.rows.assign(method="fold-" + result.rows["fold"])
        run_id = log_tuning(mlflow.target(), dataset, chosen, result.trials.assign(method="fold-" + result.trials[
            "fold"]), name="pbr-tuning", summary=summary)  # fmt: skip
        stats[dataset] = {**result.stats, "deployed": json.dumps(result.stats["deployed"]), "mlflow_run": run_id}
        context.log.info(f"{dataset}: PBR tuned on {result.stats['folds']} folds, held-out {result.stats['metric']} "
                         f"{result.stats['held_out_tuned']:.4f} vs the authors' {result.stats['held_out_default']:.4f}")
    yield dg.MaterializeResult(metadata={**_written(duckdb, TUNED_TABLE), "per_dataset": keyed_table(stats, "dataset")})


@dg.asset(deps=[query_expansions, pbr_tuned_settings], kinds={"duckdb"}, description="Per method and question, the "
          "top pbr.top_k segments of the asking user's own corpus (inner product, FAISS), docs/methods.md §4.3; pbr "
          "with the knobs tuned without the question's fold, pbr@default with the authors' settings (§4.7).",
          **_COMMON)
def retrieval_runs(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> Iterator[dg.MaterializeResult]:
    """Rank every question's segments with every method whose expansions are available."""
    settings = prag_settings.get()
    datasets = run_datasets(context, settings)
    if not datasets:  # not configured: no materialization, downstream steps skip
        return
    writes, stats = [], {}
    with duckdb.connect() as con:
        ensure_table(con, "retrieval_runs")
        for dataset in datasets:
            frame, stats[dataset] = build.retrieval_run_rows(con, dataset, settings, models.embedder,
                                                             context.log.warning)
            writes.append(("retrieval_runs", frame, {"dataset": dataset}))
        replace_many(con, writes)
    yield dg.MaterializeResult(metadata={**_written(duckdb, "retrieval_runs"),
                                         "per_dataset": keyed_table(stats, "dataset")})


@dg.asset(deps=[retrieval_runs], kinds={"duckdb"}, description="R@K (PersonaBench best-combination recall, "
          "LongMemEval recall_any) and NDCG@K for K = 1, 3, 5, 10 per dataset, method and category, plus Overall.",
          **_COMMON)
def retrieval_evaluation(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> Iterator[dg.MaterializeResult]:
    """Score the rankings of retrieval_runs; markdown table in metadata and <home>/reports/retrieval_evaluation.md."""
    settings = prag_settings.get()
    datasets = run_datasets(context, settings)
    if not datasets:  # not configured: no materialization, downstream steps skip
        return
    with duckdb.connect() as con:
        ensure_table(con, "retrieval_evaluation")
        frames = {dataset: build.evaluation_rows(con, dataset, settings) for dataset in datasets}
        replace_many(con, [("retrieval_evaluation", frame, {"dataset": d}) for d, frame in frames.items()])
    table = pd.concat(frames.values(), ignore_index=True)
    markdown = retrieval_markdown(table)
    report = settings.home_path / "reports" / "retrieval_evaluation.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(markdown + "\n", encoding="utf-8")
    context.log.info(f"retrieval evaluation: {len(table)} rows, table in {report}")
    yield dg.MaterializeResult(metadata={**_written(duckdb, "retrieval_evaluation"), "table": frame_table(table),
                                         "markdown": dg.MetadataValue.md(markdown),
                                         "report_path": dg.MetadataValue.path(str(report))})
