"""The real-data retrieval evaluation's tables (docs/methods.md §4.5, §6): their schemas and the corpus reader."""

from __future__ import annotations

import json

from prag_models.data.personabench import RetrievalQuestion, Segment
from prag_models.store import read_rows

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
