"""Embeddings cached in DuckDB by (model id, content hash): re-materializing embeds only texts never seen before."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import duckdb
import numpy as np
import pandas as pd

from prag_models.faults import maybe_fail
from prag_models.text.embedder import content_hash

CACHE_TABLE = "embedding_cache"


def ensure_cache_table(con: duckdb.DuckDBPyConnection) -> None:
    """Create the cache table if it does not exist."""
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {CACHE_TABLE} (model_id VARCHAR, content_hash VARCHAR, embedding FLOAT[], "
        "PRIMARY KEY (model_id, content_hash))"
    )


def embed_with_cache(
    con: duckdb.DuckDBPyConnection,
    embed: Callable[[Sequence[str]], np.ndarray],
    model_id: str,
    texts: Sequence[str],
    chunk_size: int = 512,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, list[str], int]:
    """Embeddings for texts (in order), their content hashes, and how many texts had to be embedded now.

    New embeddings are committed chunk by chunk, so an interrupted run keeps what it finished.
    """
    ensure_cache_table(con)
    hashes = [content_hash(t) for t in texts]
    unique = dict(zip(hashes, texts, strict=True))
    con.register("_prag_hashes", pd.DataFrame({"content_hash": list(unique)}))
    try:
        known = set(
            h
            for (h,) in con.execute(
                f"SELECT c.content_hash FROM {CACHE_TABLE} c JOIN _prag_hashes h USING (content_hash) "
                "WHERE c.model_id = ?",
                [model_id],
            ).fetchall()
        )
    finally:
        con.unregister("_prag_hashes")
    missing = [h for h in unique if h not in known]
    for start in range(0, len(missing), chunk_size):
        chunk = missing[start : start + chunk_size]
        vectors = np.asarray(embed([unique[h] for h in chunk]), dtype=np.float32)
        if not np.isfinite(vectors).all():
            raise ValueError(f"embedder {model_id!r} returned non-finite values")
        frame = pd.DataFrame({"model_id": model_id, "content_hash": chunk, "embedding": list(vectors)})
        con.register("_prag_new", frame)
        try:
            con.execute(f"INSERT OR IGNORE INTO {CACHE_TABLE} SELECT model_id, content_hash, embedding FROM _prag_new")
        finally:
            con.unregister("_prag_new")
        if progress:
            progress(min(start + chunk_size, len(missing)), len(missing))
        maybe_fail("embedding_chunk")  # reliability tests (prag_models/faults.py): die after a committed chunk
    return lookup_embeddings(con, model_id, hashes), hashes, len(missing)


def lookup_embeddings(con: duckdb.DuckDBPyConnection, model_id: str, hashes: Sequence[str]) -> np.ndarray:
    """Fetch cached embeddings in the order of hashes (KeyError naming the first missing hash)."""
    if not hashes:
        return np.zeros((0, 0), dtype=np.float32)
    con.register("_prag_lookup", pd.DataFrame({"content_hash": list(dict.fromkeys(hashes))}))
    try:
        rows = con.execute(
            f"SELECT c.content_hash, c.embedding FROM {CACHE_TABLE} c JOIN _prag_lookup l USING (content_hash) "
            "WHERE c.model_id = ?",
            [model_id],
        ).fetchall()
    finally:
        con.unregister("_prag_lookup")
    found = {h: np.asarray(v, dtype=np.float32) for h, v in rows}
    missing = [h for h in hashes if h not in found]
    if missing:
        raise KeyError(f"{len(missing)} texts have no cached embedding for {model_id!r} (first: {missing[0]})")
    return np.stack([found[h] for h in hashes])
