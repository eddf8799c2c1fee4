"""Retrieval evaluation on real data (docs/methods.md §4.5): PBR, its ablations and the QE baselines on PersonaBench and
LongMemEval, as the unpartitioned asset group ``retrieval_eval`` (one ``dataset`` column in every table).

The data never enter the project: the assets read ``data.real_data_dir`` (e.g. ``../shared/data``, or
``PRAG__DATA__REAL_DATA_DIR``). When it is empty every asset of the group logs why and yields nothing, so its
downstream steps and checks are skipped and the LaMP graph is unaffected; when it is set but holds none of the
configured ``pbr.datasets`` the assets fail with a message naming the folder.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd

from prag_assets.common import frame_table, preview, progress_logger, table_metadata
from prag_assets.partitions import DUCKDB_POOL, single_run
from prag_assets.resources import DuckDBResource, ModelsResource, PragSettingsResource
from prag_assets.task_table import CODE_VERSION
from prag_models.config import PbrSettings, Settings
from prag_models.data.personabench import RetrievalQuestion
from prag_models.llm.base import Generator
from prag_models.methods import query_expansion as qe
from prag_models.methods.pbr import NEEDS_EXPANSION, PBR_METHODS, PbrExpansion, validate_pbr_settings
from prag_models.methods.pbr_eval import (
    EmbeddingCache,
    aggregate_scores,
    build_pbr_expansions,
    per_question_scores,
    prf_histories,
    retrieve_rankings,
)
from prag_models.methods.pbr_report import retrieval_markdown
from prag_models.metrics_retrieval import KS
from prag_models.stages.pbr_lamp import CachedEmbedder, CachedGenerator
from prag_models.stages.real_data import ensure_table, read_corpus
from prag_models.store import read_rows, replace_rows
from prag_models.text.embedder import content_hash

GROUP = "retrieval_eval"
DATASETS: tuple[str, ...] = ("personabench", "longmemeval")
ALL_METHODS: tuple[str, ...] = (*PBR_METHODS, *qe.QE_METHODS)
P_PRF = "p_prf"  # expansion method name of PBR's pseudo utterances + pseudo reasoning
REPLAY_SOURCE = "replay:pbr_cached_expansions.json"
#: Datasets with the PBR authors' cached P-PRF expansions (pbr.expansion_source = auto | replay replays them).
REPLAYABLE = ("personabench",)
_COMMON = dict(group_name=GROUP, backfill_policy=single_run, pool=DUCKDB_POOL, output_required=False,
               code_version=CODE_VERSION)


def _written(duckdb: DuckDBResource, table: str) -> dict[str, dg.MetadataValue]:
    """Row count and column schema of a retrieval_eval table (every dataset)."""
    with duckdb.connect() as con:
        return table_metadata(con, table, None)


def run_datasets(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext, settings: Settings) -> list[str]:
    """Configured datasets found under data.real_data_dir; [] (logged) when it is not set; ValueError if none."""
    unknown = sorted(set(settings.pbr.datasets) - set(DATASETS))
    if unknown:
        raise ValueError(f"pbr.datasets: unknown dataset(s) {unknown}; known: {list(DATASETS)}")
    if not settings.data.real_data_dir:
        context.log.warning("data.real_data_dir is not set: the retrieval_eval group is skipped (set it, e.g. "
                            "PRAG__DATA__REAL_DATA_DIR=../shared/data)")
        return []
    root = real_data_root(settings)
    found = [d for d in settings.pbr.datasets if _present(root, d)]
    missing = [d for d in settings.pbr.datasets if d not in found]
    if not found:
        raise ValueError(f"data.real_data_dir {str(root)!r}: none of the datasets {list(settings.pbr.datasets)} "
                         "found (expected personabench/community_1/ and/or longmemeval/longmemeval_s_3.json)")
    if missing:
        context.log.warning(f"datasets {missing} not found under {root}: skipped")
    return found


def real_data_root(settings: Settings) -> Path:
    """The configured real-data folder (relative paths: from the current directory)."""
    return Path(settings.data.real_data_dir).expanduser().resolve()


def _present(root: Path, dataset: str) -> bool:
    """Whether the loader of dataset finds its files under root."""
    from prag_models.data import longmemeval, personabench

    try:
        return bool((personabench.community_names if dataset == "personabench" else longmemeval.longmemeval_file)(root))
    except ValueError:
        return False


def _personabench(settings: Settings, with_expansions: bool = True):  # noqa: ANN202 - PersonaBenchData
    """The configured PersonaBench communities (default: all) at the configured noise level, pooled."""
    from prag_models.data.personabench import load_personabench_pool

    pbr = settings.pbr
    return load_personabench_pool(
        real_data_root(settings), pbr.personabench_communities, pbr.personabench_noise, with_expansions=with_expansions
    )


def dataset_settings(pbr: PbrSettings, dataset: str) -> PbrSettings:
    """PBR settings of a dataset: LongMemEval takes lme_k1 / lme_theta / lme_k2 (docs/methods.md §4.1-4.2)."""
    if dataset == "longmemeval":
        pbr = pbr.model_copy(update={"k1": pbr.lme_k1, "theta": pbr.lme_theta, "k2": pbr.lme_k2})
    validate_pbr_settings(pbr)
    unknown = sorted(set(pbr.eval_methods) - set(ALL_METHODS))
    if unknown:
        raise ValueError(f"pbr.eval_methods: unknown method(s) {unknown}; known: {list(ALL_METHODS)}")
    return pbr


def seeded_cache(con, dataset: str, settings: Settings, models: ModelsResource) -> EmbeddingCache:
    """An EmbeddingCache holding the dataset's segment_embeddings; other texts go through embedding_cache."""
    rows = con.execute(
        "SELECT s.text, e.model_id, e.embedding FROM personal_segments s JOIN segment_embeddings e "
        "USING (dataset, user_id, segment_id) WHERE dataset = ?", [dataset]).fetchall()
    stale = {m for _, m, _ in rows} - {settings.embedder.model}
    if stale or not rows:
        raise ValueError(f"{dataset}: segment_embeddings missing or made with {sorted(stale)}, not "
                         f"{settings.embedder.model!r}: materialize segment_embeddings first")
    cache = EmbeddingCache(CachedEmbedder(con, models.embedder, settings.embedder.model, len(rows[0][2])))
    cache.vectors.update({text: np.asarray(vec, dtype=np.float32) for text, _, vec in rows})
    return cache


@dg.asset(kinds={"duckdb"}, description="Each person's (PersonaBench) or question's (LongMemEval) segments and the "
          "questions with gold segment ids and category, from data.real_data_dir (docs/methods.md §4.5).", **_COMMON)
def personal_corpora(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> Iterator[dg.MaterializeResult]:
    """Load the real datasets into tables personal_segments and personal_questions."""
    from prag_models.data.longmemeval import load_longmemeval

    settings = prag_settings.get()
    datasets = run_datasets(context, settings)
    if not datasets:  # not configured: no materialization, downstream steps skip
        return
    root, stats, last = real_data_root(settings), {}, pd.DataFrame()
    with duckdb.connect() as con:
        for dataset in datasets:
            if dataset == "personabench":
                pb = _personabench(settings, with_expansions=False)
                questions, segments, skipped = pb.questions, pb.segments_by_user, pb.skipped
            else:
                (questions, segments), skipped = load_longmemeval(root), {}
            seg_frame = pd.DataFrame(
                [(dataset, u, ui, i, s.segment_id, s.source, s.text, content_hash(s.text))
                 for ui, (u, segs) in enumerate(segments.items()) for i, s in enumerate(segs)],
                columns=["dataset", "user_id", "user_position", "position", "segment_id", "source", "text",
                         "content_hash"])
            last = pd.DataFrame(
                [(dataset, i, q.q_id, q.user, q.question, q.category, q.answer, json.dumps(q.gold_sets))
                 for i, q in enumerate(questions)],
                columns=["dataset", "position", "q_id", "user_id", "question", "category", "answer", "gold_json"])
            replace_rows(con, "personal_segments", seg_frame, {"dataset": dataset})
            replace_rows(con, "personal_questions", last, {"dataset": dataset})
            stats[dataset] = {"segments": len(seg_frame), "users": len(segments), "questions": len(last),
                              "categories": last["category"].value_counts().to_dict(), "skipped": skipped}
            context.log.info(f"{dataset}: {stats[dataset]}")
    written = _written(duckdb, "personal_segments")
    yield dg.MaterializeResult(metadata={**written, "per_dataset": dg.MetadataValue.json(stats), "root": str(root),
                                         "questions_preview": preview(last.drop(columns="gold_json"))})


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
    stats = {}
    with duckdb.connect() as con:
        for dataset in datasets:
            segs = read_rows(con, "personal_segments", {"dataset": dataset}, order_by="user_position, position")
            emb = CachedEmbedder(con, models.embedder, settings.embedder.model,
                                 progress=progress_logger(context, f"embedding {dataset} segments"))
            matrix = emb.embed(segs["text"].tolist())
            frame = segs[["dataset", "user_id", "segment_id", "content_hash"]].assign(
                model_id=settings.embedder.model, embedding=list(matrix))
            replace_rows(con, "segment_embeddings", frame, {"dataset": dataset})
            stats[dataset] = {"segments": len(frame), "newly_embedded": emb.new, "dim": emb.dim}
    written = _written(duckdb, "segment_embeddings")
    yield dg.MaterializeResult(metadata={**written, "per_dataset": dg.MetadataValue.json(stats),
                                         "newly_embedded": sum(s["newly_embedded"] for s in stats.values()),
                                         "embedder": settings.embedder.model})


def _qe_rows(dataset: str, questions: list[RetrievalQuestion], gen: Generator, methods: list[str],
             docs: dict[str, list[str]], max_new: int) -> list[tuple]:
    """Rows of query_expansions for the QE baselines, generated (through the cache) with gen."""
    user = {q.q_id: q.user for q in questions}
    rows = []
    for method in methods:
        items = [(q.q_id, q.question, docs.get(q.q_id, []) if method in qe.NEEDS_DOCS else []) for q in questions]
        for q_id, text in qe.generate_qe_expansions(gen, method, items, max_new).items():
            fallback = qe.parse_list(text)[1] if method == "mill" else "text"
            rows.append((dataset, q_id, user[q_id], method, gen.model_id, "[]", text, fallback))
    return rows


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
    pbr, stats = settings.pbr, {}
    generate = pbr.expansion_source == "generate"
    wants_prf = any(m in NEEDS_EXPANSION for m in pbr.eval_methods)
    wants_qe = [m for m in pbr.eval_methods if m in qe.QE_METHODS]
    if wants_qe and not (generate or pbr.generate_qe):
        context.log.warning(f"QE baselines {wants_qe} skipped: they need generated expansions (no cached ones exist); "
                            "set pbr.generate_qe = true or pbr.expansion_source = 'generate' to run them")
        wants_qe = []
    with duckdb.connect() as con:
        ensure_table(con, "query_expansions")
        gen = None
        for dataset in datasets:
            ds = dataset_settings(pbr, dataset)
            questions, segments = read_corpus(con, dataset)
            cache = seeded_cache(con, dataset, settings, models)
            expansions: dict[str, PbrExpansion] = {}
            # auto: the PBR authors' cached expansions where they exist (PersonaBench), the configured LLM elsewhere
            generate_here = generate or (pbr.expansion_source == "auto" and dataset not in REPLAYABLE)
            if wants_prf and not generate_here and dataset in REPLAYABLE:
                expansions = _personabench(settings).expansions
                missing = [q.q_id for q in questions if q.q_id not in expansions]
                if missing:
                    raise ValueError(f"personabench: no cached expansion for questions {missing[:5]}; "
                                     "set pbr.expansion_source = 'generate'")
            elif wants_prf and not generate_here:
                context.log.warning(f"{dataset}: no cached P-PRF expansions to replay: PBR and PBR w/o P-Anchor are "
                                    "skipped there (set pbr.expansion_source = 'generate' to generate them)")
            if (wants_prf and generate_here) or wants_qe:
                gen = gen or CachedGenerator(models.generator(), con, settings.generator.batch_size,
                                             progress_logger(context, "expansion generation"))
            before = gen.generated if gen else 0
            if wants_prf and generate_here:
                budget = settings.generator.n_ctx - pbr.expansion_max_new_tokens - 300
                expansions = build_pbr_expansions(gen, questions, segments, cache, ds, pbr.expansion_max_new_tokens,
                                                  max(budget, 64))
            source = gen.model_id if generate_here and gen else REPLAY_SOURCE
            user = {q.q_id: q.user for q in questions}
            rows = [(dataset, q_id, user[q_id], P_PRF, source, json.dumps(list(e.pseudo_utterances)), e.reasoning,
                     e.parse_fallback) for q_id, e in expansions.items() if q_id in user]
            if wants_qe:
                docs = {}
                if any(m in qe.NEEDS_DOCS for m in wants_qe):  # ThinkQE shows the top-5 segments of the question
                    docs = {q_id: texts for q_id, _, texts in prf_histories(questions, segments, cache, 5)}
                rows += _qe_rows(dataset, questions, gen, wants_qe, docs, pbr.qe_max_new_tokens)
            frame = pd.DataFrame(rows, columns=["dataset", "q_id", "user_id", "method", "source", "utterances_json",
                                                "text", "parse_fallback"])
            replace_rows(con, "query_expansions", frame, {"dataset": dataset})
            fallbacks = frame.groupby(["method", "parse_fallback"]).size()
            stats[dataset] = {"rows": len(frame), "generated_now": (gen.generated if gen else 0) - before,
                              "parse_fallbacks": {f"{m}:{f}": int(n) for (m, f), n in fallbacks.items()},
                              "sources": sorted(frame["source"].unique().tolist())}
            context.log.info(f"{dataset}: {stats[dataset]}")
    written = _written(duckdb, "query_expansions")
    yield dg.MaterializeResult(metadata={**written, "per_dataset": dg.MetadataValue.json(stats),
                                         "generator": gen.model_id if gen else "none (replay only)",
                                         "generated_now": sum(s["generated_now"] for s in stats.values())})


def _expansions_of(frame: pd.DataFrame) -> tuple[dict[str, PbrExpansion], dict[str, dict[str, str]]]:
    """P-PRF expansions and QE texts (method -> q_id -> text) from query_expansions rows."""
    prf: dict[str, PbrExpansion] = {}
    qe_texts: dict[str, dict[str, str]] = {}
    for r in frame.itertuples():
        if r.method == P_PRF:
            prf[r.q_id] = PbrExpansion(tuple(json.loads(r.utterances_json)), r.text, r.source, r.parse_fallback)
        else:
            qe_texts.setdefault(r.method, {})[r.q_id] = r.text
    return prf, qe_texts


@dg.asset(deps=[query_expansions], kinds={"duckdb"}, description="Per method and question, the top pbr.top_k "
          "segments of the asking user's own corpus (inner product, FAISS), docs/methods.md §4.3.", **_COMMON)
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
    stats = {}
    with duckdb.connect() as con:
        ensure_table(con, "retrieval_runs")
        for dataset in datasets:
            ds = dataset_settings(settings.pbr, dataset)
            questions, segments = read_corpus(con, dataset)
            prf, qe_texts = _expansions_of(read_rows(con, "query_expansions", {"dataset": dataset}))
            ids = {q.q_id for q in questions}
            methods = [m for m in ds.eval_methods if (m not in NEEDS_EXPANSION or ids <= set(prf))
                       and (m not in qe.QE_METHODS or ids <= set(qe_texts.get(m, {})))]
            skipped = [m for m in ds.eval_methods if m not in methods]
            if skipped:
                context.log.warning(f"{dataset}: methods {skipped} skipped (no expansion for every question)")
            cache = seeded_cache(con, dataset, settings, models)
            rankings = retrieve_rankings(questions, segments, cache, methods, prf, ds, qe_texts)
            user = {q.q_id: q.user for q in questions}
            frame = pd.DataFrame(
                [(dataset, m, q_id, user[q_id], rank, seg) for (m, q_id), ranked in rankings.items()
                 for rank, seg in enumerate(ranked, 1)],
                columns=["dataset", "method", "q_id", "user_id", "rank", "segment_id"])
            replace_rows(con, "retrieval_runs", frame, {"dataset": dataset})
            stats[dataset] = {"methods": methods, "skipped": skipped, "questions": len(questions),
                              "rows": len(frame), "newly_embedded": cache.embedder.new}
    written = _written(duckdb, "retrieval_runs")
    yield dg.MaterializeResult(metadata={**written, "per_dataset": dg.MetadataValue.json(stats)})


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
    ks = [k for k in KS if k <= settings.pbr.top_k]
    frames = []
    with duckdb.connect() as con:
        ensure_table(con, "retrieval_evaluation")
        for dataset in datasets:
            questions, _ = read_corpus(con, dataset)
            runs = read_rows(con, "retrieval_runs", {"dataset": dataset}, order_by="method, q_id, rank")
            rankings = {key: g["segment_id"].tolist() for key, g in runs.groupby(["method", "q_id"], sort=False)}
            methods = [m for m in ALL_METHODS if m in set(runs["method"])]
            scores = per_question_scores(questions, rankings, methods, ks)
            if dataset == "personabench":  # per community as well as pooled (the paper pools every community)
                from prag_models.data.personabench import community_of

                per = scores.assign(dataset=[f"personabench[{community_of(q)}]" for q in scores["q_id"]])
                scores = pd.concat([scores, per], ignore_index=True)
            frame = aggregate_scores(scores)
            replace_rows(con, "retrieval_evaluation", frame, {"dataset": dataset})
            frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    markdown = retrieval_markdown(table)
    report = settings.home_path / "reports" / "retrieval_evaluation.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(markdown + "\n", encoding="utf-8")
    context.log.info(f"retrieval evaluation: {len(table)} rows, table in {report}")
    written = _written(duckdb, "retrieval_evaluation")
    yield dg.MaterializeResult(metadata={**written, "table": frame_table(table),
                                         "markdown": dg.MetadataValue.md(markdown),
                                         "report_path": dg.MetadataValue.path(str(report))})
