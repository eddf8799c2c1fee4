"""The real-data retrieval evaluation's tables (docs/methods.md §4.5, §6): their schemas, the corpus reader and their
data-quality rules (the checks of group retrieval_eval run them)."""

from __future__ import annotations

import json

import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.personabench import RetrievalQuestion, Segment
from prag_models.storage.store import column_to_matrix, read_rows
from prag_models.storage.validation import (
    Expect,
    between,
    in_set,
    matrix_problems,
    min_rows,
    not_null,
    unique,
    validate_frame,
)
from prag_models.text.embedder import embedder_key

TABLE_SCHEMAS = {
    "query_expansions": "dataset VARCHAR, q_id VARCHAR, user_id VARCHAR, method VARCHAR, source VARCHAR, "
    "utterances_json VARCHAR, text VARCHAR, parse_fallback VARCHAR",
    "retrieval_runs": "dataset VARCHAR, method VARCHAR, q_id VARCHAR, user_id VARCHAR, rank INTEGER, "
    "segment_id VARCHAR",
    "retrieval_evaluation": "dataset VARCHAR, method VARCHAR, category VARCHAR, metric VARCHAR, k INTEGER, "
    "value DOUBLE, n_questions BIGINT, ci_low DOUBLE, ci_high DOUBLE",
}


def ensure_table(con, table: str) -> None:
    """Create one of the group's tables with its schema (so empty results still have typed columns)."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({TABLE_SCHEMAS[table]})")
    if table == "retrieval_evaluation":  # stores written before the intervals existed
        for column in ("ci_low", "ci_high"):
            con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} DOUBLE")


def read_corpus(con, dataset: str) -> tuple[list[RetrievalQuestion], dict[str, list[Segment]]]:
    """Questions and per-user segments of a dataset, in the loader's order, from the personal_corpora tables."""
    segs = read_rows(con, "personal_segments", {"dataset": dataset}, order_by="user_position, position")
    by_user: dict[str, list[Segment]] = {}
    for r in segs.itertuples():
        by_user.setdefault(r.user_id, []).append(Segment(r.user_id, r.segment_id, r.text, r.source))
    qs = read_rows(con, "personal_questions", {"dataset": dataset}, order_by="position")
    questions = [
        RetrievalQuestion(dataset, r.user_id, r.q_id, r.question, json.loads(r.gold_json), r.category, r.answer)
        for r in qs.itertuples()
    ]
    return questions, by_user


def _gx(name: str, df: pd.DataFrame, suite: list[Expect]) -> list[str]:
    """Problems reported by a Great Expectations suite."""
    return validate_frame(name, df, suite)[1]


def corpora_problems(con, dataset: str, settings: Settings) -> list[str]:
    """Segments and questions non-empty, segment ids unique per user, gold ids in the user's corpus."""
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


def segment_embedding_problems(con, dataset: str, settings: Settings) -> list[str]:
    """One finite unit vector per segment, from the configured embedder."""
    df = read_rows(con, "segment_embeddings", {"dataset": dataset})
    problems = _gx(f"seg_emb_{dataset}", df, [*not_null("segment_id", "embedding"), unique("user_id", "segment_id"),
                                               in_set("model_id", [embedder_key(settings.embedder)])])
    problems += matrix_problems(column_to_matrix(df["embedding"].tolist()), unit_norm=True)
    n = con.execute("SELECT count(*) FROM personal_segments WHERE dataset = ?", [dataset]).fetchone()[0]
    return problems + ([f"{len(df)} embeddings for {n} segments"] if n != len(df) else [])


def expansion_problems(con, dataset: str, settings: Settings) -> list[str]:
    """(question, method, source) unique; every expansion method covers every question."""
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


def run_problems(con, dataset: str, settings: Settings) -> list[str]:
    """Every question ranked by every method, only with segments of the asking user's corpus."""
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


def evaluation_problems(con, dataset: str, settings: Settings) -> list[str]:
    """Every metric within [0, 1] over at least one question; every method has an Overall score."""
    df = read_rows(con, "retrieval_evaluation", {"dataset": dataset})
    problems = _gx(f"retrieval_eval_{dataset}", df, [
        *not_null("method", "category", "metric", "value"), unique("method", "category", "metric", "k"),
        between("value", 0.0, 1.0), between("n_questions", 1, None), min_rows(1)])
    ran = {m for (m,) in con.execute("SELECT DISTINCT method FROM retrieval_runs WHERE dataset = ?",
                                     [dataset]).fetchall()}
    missing = ran - set(df.loc[df["category"] == "Overall", "method"])
    return problems + ([f"methods without an Overall score: {sorted(missing)}"] if missing else [])
