"""What a DuckDB table holds: its columns and types, and how many rows some tasks have (asset metadata reads it)."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from prag_models.storage.store import table_exists


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    """(column name, DuckDB type) of a table in declaration order; empty when the table does not exist."""
    return [
        (str(name), str(kind))
        for name, kind in con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = ? AND table_schema = 'main' ORDER BY ordinal_position",
            [table],
        ).fetchall()
    ]


def task_row_count(con: duckdb.DuckDBPyConnection, table: str, tasks: Sequence[str] | None = None) -> int:
    """Rows of a table that belong to the given tasks (all rows when tasks is None; 0 when the table is missing)."""
    if not table.isidentifier():
        raise ValueError(f"invalid table name {table!r}")
    if not table_exists(con, table):
        return 0
    columns = {name for name, _ in table_columns(con, table)}
    if tasks is None or "task" not in columns:
        return int(con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
    return int(con.execute(f'SELECT count(*) FROM "{table}" WHERE task IN ?', [list(tasks)]).fetchone()[0])


def task_rows(con: duckdb.DuckDBPyConnection, table: str, task: str) -> int:
    """Rows of one task partition of a table (`WHERE task = ?`; all rows of a table without a task column)."""
    if not table.isidentifier():
        raise ValueError(f"invalid table name {table!r}")
    if not table_exists(con, table):
        return 0
    if "task" not in {name for name, _ in table_columns(con, table)}:
        return int(con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
    return int(con.execute(f'SELECT count(*) FROM "{table}" WHERE task = ?', [task]).fetchone()[0])


#: What a column means wherever it appears in the main tables.
_COMMON = {
    "task": "LaMP task (the asset's partition key)",
    "split": "train or dev (the LaMP time split)",
    "sample_id": "LaMP question id",
    "user_id": "the user who asked (the question's profile owner)",
    "doc_id": "profile document id",
    "position": "the document's place in the user's profile, oldest first (undated last)",
    "text": "the document as the prompts render it",
    "content_hash": "sha256 of the text (first 32 hex): the embedding cache key",
    "model_id": "the encoder that embedded the text",
    "embedding": "unit-norm vector (FLOAT[])",
    "method": "retrieval method (oracle_community: the reference ceiling that sees the planted communities)",
    "rank": "1 = the first retrieved document",
    "source_user_id": "whose profile the document comes from (the user himself or a neighbour)",
    "score": "the method's retrieval score (higher = better)",
    "writers": "how many users the asker may see wrote this very text (item_cf counts identical documents; else 1)",
    "cluster": "the user's cluster (HDBSCAN noise users share one extra cluster)",
    "metric": "LaMP metric (accuracy, F1, MAE, RMSE, ROUGE-1/L) or retrieval metric (R@k, NDCG@k, MRR, label-hit@k)",
    "value": "the metric over the samples",
    "ci_low": "95 % bootstrap interval, low",
    "ci_high": "95 % bootstrap interval, high",
    "n_samples": "samples the value is computed on",
    "is_primary": "the task's primary metric",
    "generator_id": "the LLM that answered",
    "answer_mode": "label scoring (LaMP-1/2/3) or greedy generation (LaMP-4/5/7)",
    "prompt_hash": "hash of the prompt (the generation cache key)",
    "output": "the LLM's raw answer",
    "prediction": "the answer parsed for the metric",
    "gold": "the LaMP gold output (None when the split is unlabeled)",
    "input": "the LaMP question as given",
    "query": "the retrieval query extracted from the question",
}
_TABLES = {
    "lamp_samples": ["task", "split", "sample_id", "user_id", "input", "query", "gold"],
    "profile_documents": ["task", "user_id", "doc_id", "position", "text", "content_hash"],
    "document_embeddings": ["task", "user_id", "doc_id", "position", "model_id", "content_hash", "embedding"],
    "query_embeddings": ["task", "sample_id", "user_id", "model_id", "content_hash", "embedding"],
    "user_embeddings": ["task", "user_id", "embedding"],
    "user_clusters": ["task", "user_id", "cluster"],
    "similar_users": ["task", "user_id", "rank", "score"],
    "generations": ["task", "method", "sample_id", "user_id", "generator_id", "answer_mode", "prompt_hash", "output",
                    "prediction", "gold"],
    "lamp_evaluation": ["task", "method", "metric", "value", "ci_low", "ci_high", "n_samples", "is_primary"],
    "lamp_retrieval_evaluation": ["task", "method", "metric", "value", "ci_low", "ci_high", "n_samples", "is_primary"],
}  # fmt: skip
_RETRIEVAL = ["task", "method", "sample_id", "user_id", "rank", "doc_id", "source_user_id", "score"]
_TABLES |= dict.fromkeys(["baseline_retrievals", "cfrag_retrievals", "pbr_lamp_retrievals"], _RETRIEVAL)
_TABLES["clusterrag_retrievals"] = [*_RETRIEVAL, "writers"]
_OWN = {
    "user_embeddings": {"embedding": "z_u: mean of the user's unit document embeddings (cold start: of his queries)"},
    "similar_users": {"rank": "1 = the most similar member of the user's cluster", "score": "cosine similarity"},
}

#: What the columns of the main tables mean (the Dagster UI shows them in each asset's column schema).
COLUMN_DESCRIPTIONS: dict[str, dict[str, str]] = {
    table: {**{c: _COMMON[c] for c in columns}, **{c: d for c, d in _COMMON.items() if c not in columns},
            **_OWN.get(table, {})} for table, columns in _TABLES.items()
}  # fmt: skip
