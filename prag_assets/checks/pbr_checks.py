"""Blocking checks of the retrieval_eval group (real-data PBR evaluation) and of the LaMP PBR retrieval option."""

import json
from collections.abc import Callable

import dagster as dg
import pandas as pd

from prag_assets.assets import pbr_eval, pbr_lamp
from prag_assets.checks.lamp_checks import table_check
from prag_assets.partitions import DUCKDB_POOL
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_models.config import Settings
from prag_models.data.source import llm_eval_sample_ids
from prag_models.store import column_to_matrix, read_rows
from prag_models.validation import Expect, between, in_set, matrix_problems, min_rows, not_null, unique, validate_frame

#: (connection, dataset, settings) -> problems of one dataset.
DatasetRule = Callable[[object, str, Settings], list[str]]


def dataset_check(
    asset: dg.AssetsDefinition, name: str, description: str, rule: DatasetRule
) -> dg.AssetChecksDefinition:
    """A blocking check running rule on every dataset of the retrieval_eval run."""

    @dg.asset_check(asset=asset, name=name, description=description, blocking=True, pool=DUCKDB_POOL)
    def _check(
        context: dg.AssetCheckExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
    ) -> dg.AssetCheckResult:
        settings = prag_settings.get()
        datasets = pbr_eval.run_datasets(context, settings)
        failures: list[str] = []
        with duckdb.connect() as con:
            for dataset in datasets:
                failures += [f"{dataset}: {p}" for p in rule(con, dataset, settings)]
        for f in failures:
            context.log.error(f"{asset.key.to_user_string()} check failed: {f}")
        return dg.AssetCheckResult(passed=not failures, metadata={
            "datasets": dg.MetadataValue.json(datasets),
            "failures": dg.MetadataValue.md("\n".join(f"- {f}" for f in failures) or "none"),
        })

    return _check


def _gx(name: str, df: pd.DataFrame, suite: list[Expect]) -> list[str]:
    """Problems reported by a Great Expectations suite."""
    return validate_frame(name, df, suite)[1]


def _corpora(con, dataset: str, settings: Settings) -> list[str]:
    segs = read_rows(con, "personal_segments", {"dataset": dataset})
    qs = read_rows(con, "personal_questions", {"dataset": dataset})
    problems = _gx(f"segments_{dataset}", segs, [
        *not_null("user_id", "segment_id", "text"), unique("user_id", "segment_id"), min_rows(1),
        Expect("ExpectColumnValueLengthsToBeBetween", {"column": "text", "min_value": 1})])
    problems += _gx(f"questions_{dataset}", qs, [
        *not_null("q_id", "user_id", "question", "gold_json", "category"), unique("q_id"), min_rows(1)])
    corpus: dict[str, set[str]] = {}
    for user, seg in zip(segs["user_id"], segs["segment_id"], strict=True):
        corpus.setdefault(user, set()).add(seg)
    bad = [q.q_id for q in qs.itertuples() if not corpus.get(q.user_id)
           or not (gold := json.loads(q.gold_json)) or any(not g or set(g) - corpus[q.user_id] for g in gold)]
    if bad:
        problems.append(f"{len(bad)} questions have no gold or a gold id outside the user's corpus, e.g. {bad[:3]}")
    return problems


def _embeddings(con, dataset: str, settings: Settings) -> list[str]:
    df = read_rows(con, "segment_embeddings", {"dataset": dataset})
    problems = _gx(f"seg_emb_{dataset}", df, [*not_null("segment_id", "embedding"), unique("user_id", "segment_id"),
                                               in_set("model_id", [settings.embedder.model])])
    problems += matrix_problems(column_to_matrix(df["embedding"].tolist()), unit_norm=True)
    n = con.execute("SELECT count(*) FROM personal_segments WHERE dataset = ?", [dataset]).fetchone()[0]
    return problems + ([f"{len(df)} embeddings for {n} segments"] if n != len(df) else [])


def _expansions(con, dataset: str, settings: Settings) -> list[str]:
    df = read_rows(con, "query_expansions", {"dataset": dataset})
    problems = _gx(f"expansions_{dataset}", df, [*not_null("q_id", "method", "source", "text", "utterances_json"),
                                                 unique("q_id", "method", "source")])
    if df.empty:
        return problems
    if not all(isinstance(json.loads(u), list) for u in df["utterances_json"]):
        problems.append("utterances_json is not a JSON list everywhere")
    n_q = con.execute("SELECT count(*) FROM personal_questions WHERE dataset = ?", [dataset]).fetchone()[0]
    short = {m: len(g) for m, g in df.groupby("method") if g["q_id"].nunique() != n_q}
    return problems + ([f"expansion methods not covering all {n_q} questions: {short}"] if short else [])


def _runs(con, dataset: str, settings: Settings) -> list[str]:
    df = read_rows(con, "retrieval_runs", {"dataset": dataset})
    problems = _gx(f"runs_{dataset}", df, [*not_null("method", "q_id", "segment_id"), unique("method", "q_id", "rank"),
                                           between("rank", 1, settings.pbr.top_k), min_rows(1)])
    questions = {q for (q,) in con.execute("SELECT q_id FROM personal_questions WHERE dataset = ?",
                                           [dataset]).fetchall()}
    unranked = {m: len(questions - set(g["q_id"])) for m, g in df.groupby("method")}
    unranked = {m: n for m, n in unranked.items() if n}
    if unranked:
        problems.append(f"questions not ranked (count per method): {unranked}")
    foreign = con.execute(
        "SELECT count(*) FROM retrieval_runs r LEFT JOIN personal_segments s ON s.dataset = r.dataset "
        "AND s.user_id = r.user_id AND s.segment_id = r.segment_id WHERE r.dataset = ? AND s.segment_id IS NULL",
        [dataset]).fetchone()[0]
    return problems + ([f"{foreign} ranked segments are not in the asking user's corpus"] if foreign else [])


def _evaluation(con, dataset: str, settings: Settings) -> list[str]:
    df = read_rows(con, "retrieval_evaluation", {"dataset": dataset})
    problems = _gx(f"retrieval_eval_{dataset}", df, [
        *not_null("method", "category", "metric", "value"), unique("method", "category", "metric", "k"),
        between("value", 0.0, 1.0), between("n_questions", 1, None), min_rows(1)])
    ran = {m for (m,) in con.execute("SELECT DISTINCT method FROM retrieval_runs WHERE dataset = ?",
                                     [dataset]).fetchall()}
    missing = ran - set(df.loc[df["category"] == "Overall", "method"])
    return problems + ([f"methods without an Overall score: {sorted(missing)}"] if missing else [])


def _lamp_suite(task: str, settings: Settings) -> list[Expect]:
    return [*not_null("method", "sample_id", "user_id", "doc_id", "source_user_id", "score"),
            unique("method", "sample_id", "rank"), between("rank", 1, settings.retrieval.k),
            in_set("method", list(pbr_lamp.LAMP_METHODS))]


def _lamp_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    problems = []
    foreign = df[df["source_user_id"] != df["user_id"]]
    if len(foreign):
        problems.append(f"{len(foreign)} documents come from another user's profile, e.g. "
                        f"{foreign[['method', 'sample_id', 'doc_id']].head(3).values.tolist()}")
    missing = con.execute(
        f"SELECT count(*) FROM {pbr_lamp.TABLE} r LEFT JOIN profile_documents p ON p.task = r.task "
        "AND p.user_id = r.user_id AND p.doc_id = r.doc_id WHERE r.task = ? AND p.doc_id IS NULL", [task]).fetchone()[0]
    if missing:
        problems.append(f"{missing} retrieved documents are not in the asking user's profile")
    sql = "SELECT sample_id FROM lamp_samples WHERE task = ? AND split = 'dev'"
    dev = [s for (s,) in con.execute(sql, [task]).fetchall()]
    expected = {"pbr": len(llm_eval_sample_ids(dev, settings))}  # P-PRF runs on the LLM-evaluation samples only
    short = {m: g["sample_id"].nunique() for m, g in df.groupby("method")
             if g["sample_id"].nunique() != expected.get(m, len(dev))}  # fmt: skip
    return problems + ([f"methods short of their samples (dev: {len(dev)}): {short}"] if short else [])


pbr_checks = [
    dataset_check(pbr_eval.personal_corpora, "corpora_valid", "Segments and questions non-empty, segment ids unique "
                  "per user, every gold id in the asking user's corpus.", _corpora),
    dataset_check(pbr_eval.segment_embeddings, "embeddings_valid", "One finite unit vector per segment, from the "
                  "configured embedder.", _embeddings),
    dataset_check(pbr_eval.query_expansions, "expansions_valid", "(question, method, source) unique; every expansion "
                  "method covers every question.", _expansions),
    dataset_check(pbr_eval.retrieval_runs, "every_question_ranked", "Every question ranked by every method, only "
                  "with segments of the asking user's corpus, ranks 1..pbr.top_k.", _runs),
    dataset_check(pbr_eval.retrieval_evaluation, "metrics_in_unit_interval", "Every R@K / NDCG@K within [0, 1] "
                  "over at least one question; every method has an Overall score.", _evaluation),
    table_check(pbr_lamp.pbr_lamp_retrievals, pbr_lamp.TABLE, "docs_from_own_profile", "Retrieved documents exist "
                "and come only from the asking user's own profile; every dev sample served (pbr: every LLM-evaluation "
                "sample).", _lamp_suite, _lamp_extra),
]
