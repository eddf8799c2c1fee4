"""Generation cache in DuckDB: the same prompt with the same model and budget is never generated twice."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from prag_models.llm.base import GenerationError, Generator

if TYPE_CHECKING:
    import duckdb

CACHE_TABLE = "generation_cache"

_DDL = f"""
CREATE TABLE IF NOT EXISTS {CACHE_TABLE} (
    generator_id VARCHAR NOT NULL,
    prompt_hash VARCHAR NOT NULL,
    max_new_tokens INTEGER NOT NULL,
    prompt VARCHAR,
    output VARCHAR,
    created_at TIMESTAMP,
    PRIMARY KEY (generator_id, prompt_hash, max_new_tokens)
)
"""


def prompt_hash(prompt: str) -> str:
    """sha256 hex digest of the prompt text, the cache key."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def ensure_cache_table(con: duckdb.DuckDBPyConnection) -> None:
    """Create the generation_cache table if it does not exist."""
    con.execute(_DDL)


def lookup_cached(
    con: duckdb.DuckDBPyConnection, generator_id: str, hashes: Sequence[str], max_new_tokens: int
) -> dict[str, str]:
    """Cached outputs for the given prompt hashes, keyed by hash."""
    if not hashes:
        return {}
    rows = con.execute(
        f"SELECT prompt_hash, output FROM {CACHE_TABLE} WHERE generator_id = ? AND max_new_tokens = ? "
        "AND prompt_hash IN (SELECT unnest(?::VARCHAR[]))",
        [generator_id, max_new_tokens, list(hashes)],
    ).fetchall()
    return {h: out for h, out in rows}


def _store(
    con: duckdb.DuckDBPyConnection,
    generator_id: str,
    max_new_tokens: int,
    items: Sequence[tuple[str, str, str]],
) -> None:
    """Insert (hash, prompt, output) rows; rows already present are left as they are."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    con.executemany(
        f"INSERT INTO {CACHE_TABLE} VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [(generator_id, h, max_new_tokens, p, out, now) for h, p, out in items],
    )


def generate_cached(
    generator: Generator,
    prompts: list[str],
    max_new_tokens: int,
    con: duckdb.DuckDBPyConnection,
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[str], int]:
    """Outputs for prompts (in order) through the cache, and how many distinct prompts were actually generated.

    Identical prompts are generated once; the misses go to the generator in batches of batch_size and each
    finished batch is written at once, so an interrupted run keeps its finished batches. progress(done, total)
    is called after each batch with the number of distinct missing prompts generated so far and in total.
    """
    ensure_cache_table(con)
    generator_id = generator.model_id
    hashes = [prompt_hash(p) for p in prompts]
    unique: dict[str, str] = {}
    for h, p in zip(hashes, prompts, strict=True):
        unique.setdefault(h, p)
    outputs = lookup_cached(con, generator_id, list(unique), max_new_tokens)
    missing = [h for h in unique if h not in outputs]
    step = max(1, batch_size)
    done = 0
    for start in range(0, len(missing), step):
        batch = missing[start : start + step]
        batch_prompts = [unique[h] for h in batch]
        generated = generator.generate(batch_prompts, max_new_tokens)
        if len(generated) != len(batch):
            raise GenerationError(f"{generator_id} returned {len(generated)} outputs for {len(batch)} prompts")
        _store(con, generator_id, max_new_tokens, list(zip(batch, batch_prompts, generated, strict=True)))
        outputs.update(zip(batch, generated, strict=True))
        done += len(batch)
        if progress is not None:
            progress(done, len(missing))
    return [outputs[h] for h in hashes], done
