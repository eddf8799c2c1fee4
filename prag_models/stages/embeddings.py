"""Stage 2 (embeddings): unit-norm document and query embeddings from the frozen encoder, cached by content hash.

Both tables are written from DuckDB to DuckDB: the texts the cache lacks stream to the encoder chunk by chunk, and
the task's rows are an INSERT … SELECT joining the cache (vectors cast to ``FLOAT[d]``, no ORDER BY: readers order), so
a task's documents are never held in Python nor sorted as a whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prag_models.storage.hashing import SQL_HASH
from prag_models.storage.store import QueryRows, require_table
from prag_models.text.embedding_cache import CACHE_TABLE, cache_dim, embed_missing

if TYPE_CHECKING:
    import duckdb

    from prag_models.text.embedder import Embedder

Progress = Callable[[int, int], None] | None

#: The texts of a task's documents and queries (columns content_hash, text, user_id and the row keys).
DOCUMENT_SOURCE = "SELECT task, user_id, doc_id, position, content_hash, text FROM profile_documents WHERE task = ?"
QUERY_SOURCE = (
    f"SELECT task, sample_id, user_id, {SQL_HASH.format('query')} AS content_hash, query AS text "
    "FROM lamp_samples WHERE task = ?"
)


def _cached_rows(
    con: duckdb.DuckDBPyConnection, source: str, columns: str, params: list[object], model_id: str, what: str
) -> tuple[QueryRows, int]:
    """The task's rows (source joined to the cache, vectors as FLOAT[d]) and d; KeyError when a text has no vector."""
    (n,) = con.execute(f"SELECT count(*) FROM ({source})", params).fetchall()[0]
    dim = cache_dim(con, model_id) if n else 0
    sql = (
        f"SELECT {columns}, ?::VARCHAR AS model_id, s.content_hash, "
        f"c.embedding{f'::FLOAT[{dim}]' if dim else ''} AS embedding "
        f"FROM ({source}) s JOIN {CACHE_TABLE} c ON c.content_hash = s.content_hash AND c.model_id = ?"
    )
    rows = QueryRows(sql, (model_id, *params, model_id), n)
    (found,) = con.execute(f"SELECT count(*) FROM ({sql})", list(rows.params)).fetchall()[0]
    if found > n:  # the cache holds a key twice: a writer bypassed embed_missing / insert_uncached_sql
        raise RuntimeError(f"{CACHE_TABLE} holds some of the {what}' keys more than once for {model_id!r}")
    if found != n:
        raise KeyError(f"{n - found} {what} have no cached embedding for {model_id!r}")
    return rows, dim


def document_embedding_rows(
    con: duckdb.DuckDBPyConnection, task: str, embedder: Embedder, progress: Progress = None
) -> tuple[QueryRows, dict[str, Any]]:
    """One embedding per profile document of a task (only texts not in embedding_cache are embedded)."""
    require_table(con, "profile_documents")
    source = DOCUMENT_SOURCE
    new = embed_missing(con, embedder.embed, embedder.model_id, source, [task], progress=progress)
    rows, dim = _cached_rows(con, source, "s.task, s.user_id, s.doc_id, s.position", [task], embedder.model_id,
                             "documents")  # fmt: skip
    return rows, {"documents": len(rows), "newly_embedded": new, "dim": dim}


def query_embedding_rows(
    con: duckdb.DuckDBPyConnection, task: str, embedder: Embedder, progress: Progress = None
) -> tuple[QueryRows, dict[str, Any]]:
    """One embedding per sample query of a task (docs/methods.md §1 query side), cached."""
    require_table(con, "lamp_samples")
    source = QUERY_SOURCE
    new = embed_missing(con, embedder.embed, embedder.model_id, source, [task], progress=progress)
    rows, _ = _cached_rows(con, source, "s.task, s.sample_id, s.user_id", [task], embedder.model_id, "queries")
    return rows, {"queries": len(rows), "newly_embedded": new}
