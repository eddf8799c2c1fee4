"""Embeddings cached in DuckDB by (model id, content hash): re-materializing embeds only texts never seen before.

The model id is the embedder's key (prag_models.text.embedder.embedder_key): the model name, with the backend after
a "#" unless torch fp32 (e.g. ``sentence-transformers/all-MiniLM-L6-v2#onnx_int8/v2``), so that vectors of one backend
or quantisation are never returned for another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import duckdb
import numpy as np
import pyarrow as pa

from prag_models.storage.faults import maybe_fail
from prag_models.storage.store import column_to_matrix, iter_batches, matrix_to_column
from prag_models.text.embedder import content_hash

CACHE_TABLE = "embedding_cache"


def ensure_cache_table(con: duckdb.DuckDBPyConnection) -> None:
    """Create the cache table if it does not exist (``FLOAT[]``: models of any width share it; the task tables that
    read from it cast to ``FLOAT[d]``), and drop the primary key of a file written before it went.

    (model_id, content_hash) is unique by construction (only uncached hashes, one row each, are inserted, by the
    file's single writer), not by a key: DuckDB rewrites a table's whole key index at every checkpoint, which cost
    9.8 s after a one-row insert into a 3.7 M-row cache.
    """
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {CACHE_TABLE} (model_id VARCHAR, content_hash VARCHAR, embedding FLOAT[])"
    )
    keyed = con.execute(
        "SELECT count(*) FROM duckdb_constraints() WHERE table_name = ? AND constraint_type = 'PRIMARY KEY'",
        [CACHE_TABLE],
    ).fetchall()[0][0]
    if keyed:
        try:
            con.begin()
        except duckdb.TransactionException:  # already inside the caller's transaction: part of it
            own = False
        else:
            own = True
        try:
            con.execute(f"CREATE TABLE _prag_cache_unkeyed AS SELECT * FROM {CACHE_TABLE}")
            con.execute(f"DROP TABLE {CACHE_TABLE}")
            con.execute(f"ALTER TABLE _prag_cache_unkeyed RENAME TO {CACHE_TABLE}")
            if own:
                con.commit()
        except BaseException:
            if own:
                con.rollback()
            raise


def insert_uncached_sql(relation: str) -> str:
    """SQL inserting the rows of a registered relation (model_id, content_hash, embedding) whose key the cache
    lacks, one per key (shards computed elsewhere may overlap what was cached since); returns the count."""
    return (
        f"INSERT INTO {CACHE_TABLE} SELECT model_id, content_hash, any_value(embedding) FROM {relation} n "
        f"WHERE NOT EXISTS (SELECT 1 FROM {CACHE_TABLE} c WHERE c.model_id = n.model_id "
        "AND c.content_hash = n.content_hash) GROUP BY model_id, content_hash"
    )


def _store(con: duckdb.DuckDBPyConnection, model_id: str, hashes: pa.Array | list[str], vectors: np.ndarray) -> None:
    """Insert one chunk of new embeddings (an Arrow table: the vectors stay one float32 buffer); the caller found
    the hashes uncached and distinct, so a plain insert keeps each key once."""
    if not np.isfinite(vectors).all():
        raise ValueError(f"embedder {model_id!r} returned non-finite values")
    models = pa.array([model_id] * len(vectors), pa.string())
    frame = pa.table({"model_id": models, "content_hash": hashes, "embedding": matrix_to_column(vectors)})
    con.register("_prag_new", frame)
    try:
        con.execute(f"INSERT INTO {CACHE_TABLE} SELECT model_id, content_hash, embedding FROM _prag_new")
    finally:
        con.unregister("_prag_new")


def missing_query(source_sql: str, params: Sequence[object], model_id: str) -> tuple[str, list[object]]:
    """The (content_hash, text) rows of a source query (columns content_hash, text) the cache lacks for the model,
    one per hash, and its parameters."""
    # The cached hashes are first narrowed to the source's (a semi-join whose hash table holds the source's hashes):
    # an anti-join straight against the cache builds its table from every cached hash (finding a task's 20,000
    # queries in a 3.7 M-row cache: 0.22-0.43 s that way, 0.06 s this way).
    sql = (
        f"WITH src AS (SELECT content_hash, any_value(text) AS text FROM ({source_sql}) GROUP BY content_hash), "
        f"known AS (SELECT c.content_hash FROM {CACHE_TABLE} c WHERE c.model_id = ? "
        "AND c.content_hash IN (SELECT content_hash FROM src)) "
        "SELECT content_hash, text FROM src WHERE content_hash NOT IN (SELECT content_hash FROM known)"
    )
    return sql, [*params, model_id]


def missing_batches(
    con: duckdb.DuckDBPyConnection, missing_sql: str, args: Sequence[object], chunk_size: int
) -> Iterator[pa.RecordBatch]:
    """The rows of a missing_query in content-hash order, in batches of at most chunk_size: the texts of a batch pad
    each other in the encoder, and the Ray engine and the user shards (every n-th batch) must cut the very batches
    the local stage cuts, so neither a batch's members nor their order may depend on the order in which DuckDB's
    threads return a GROUP BY's rows (they did: two shards then missed some batches and embedded others twice)."""
    ordered = f"SELECT * FROM ({missing_sql}) ORDER BY content_hash"
    yield from iter_batches(con, ordered, args, rows=chunk_size)


def embed_missing(
    con: duckdb.DuckDBPyConnection,
    embed: Callable[[Sequence[str]], np.ndarray],
    model_id: str,
    source_sql: str,
    params: Sequence[object] = (),
    chunk_size: int = 512,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Embed the texts of a query (columns content_hash, text) that have no cached embedding for the model; returns
    how many. The texts stream from DuckDB chunk by chunk and each chunk is committed, so memory stays at one chunk
    and an interrupted run keeps what it finished."""
    ensure_cache_table(con)
    missing, args = missing_query(source_sql, params, model_id)
    (total,) = con.execute(f"SELECT count(*) FROM ({missing})", args).fetchall()[0]
    done = 0
    if total:
        for batch in missing_batches(con, missing, args, chunk_size):
            _store(con, model_id, batch["content_hash"], np.asarray(embed(batch["text"].to_pylist()), np.float32))
            done += batch.num_rows
            if progress:
                progress(done, total)
            maybe_fail("embedding_chunk")  # reliability tests (storage/faults.py): die after a committed chunk
    return int(total)


def cache_dim(con: duckdb.DuckDBPyConnection, model_id: str) -> int:
    """Width of the model's cached embeddings (LookupError when nothing is cached for it)."""
    rows = con.execute(f"SELECT len(embedding) FROM {CACHE_TABLE} WHERE model_id = ? LIMIT 1", [model_id]).fetchall()
    if not rows:
        raise LookupError(f"no cached embedding for {model_id!r}")
    return int(rows[0][0])


def embed_with_cache(
    con: duckdb.DuckDBPyConnection,
    embed: Callable[[Sequence[str]], np.ndarray],
    model_id: str,
    texts: Sequence[str],
    chunk_size: int = 512,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, list[str], int]:
    """Embeddings for a short list of texts (in order), their content hashes, and how many had to be embedded now.

    For a task's documents use embed_missing, which streams from the table instead of holding the texts.
    """
    ensure_cache_table(con)
    hashes = [content_hash(t) for t in texts]
    unique = dict(zip(hashes, texts, strict=True))
    con.register("_prag_hashes", pa.table({"content_hash": pa.array(list(unique), pa.string())}))
    try:
        known = set(
            con.sql(
                f"SELECT c.content_hash FROM {CACHE_TABLE} c JOIN _prag_hashes h USING (content_hash) "
                "WHERE c.model_id = ?",
                params=[model_id],
            )
            .to_arrow_table()["content_hash"]
            .to_pylist()
        )
    finally:
        con.unregister("_prag_hashes")
    missing = [h for h in unique if h not in known]
    for start in range(0, len(missing), chunk_size):
        chunk = missing[start : start + chunk_size]
        _store(con, model_id, chunk, np.asarray(embed([unique[h] for h in chunk]), dtype=np.float32))
        if progress:
            progress(min(start + chunk_size, len(missing)), len(missing))
        maybe_fail("embedding_chunk")  # reliability tests (prag_models/storage/faults.py): die after a committed chunk
    return lookup_embeddings(con, model_id, hashes), hashes, len(missing)


def lookup_embeddings(con: duckdb.DuckDBPyConnection, model_id: str, hashes: Sequence[str]) -> np.ndarray:
    """Fetch cached embeddings in the order of hashes as one float32 array (KeyError naming the first missing hash)."""
    if not hashes:
        return np.zeros((0, 0), dtype=np.float32)
    con.register("_prag_lookup", pa.table({"i": np.arange(len(hashes)), "content_hash": pa.array(hashes, pa.string())}))
    try:
        found = con.sql(
            f"SELECT l.i, c.embedding FROM _prag_lookup l LEFT JOIN {CACHE_TABLE} c "
            "ON c.content_hash = l.content_hash AND c.model_id = ? ORDER BY l.i",
            params=[model_id],
        ).to_arrow_table()["embedding"]
    finally:
        con.unregister("_prag_lookup")
    if found.null_count:
        first = int(np.flatnonzero(found.is_null().to_numpy(zero_copy_only=False))[0])
        raise KeyError(f"{found.null_count} texts have no cached embedding for {model_id!r} (first: {hashes[first]})")
    return column_to_matrix(found)
