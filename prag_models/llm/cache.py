"""LLM output cache in DuckDB: the same prompt with the same model and budget (or label set) is never run twice."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from prag_models.llm.base import GenerationError, Generator, generate_batch

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


def cached_outputs(
    con: duckdb.DuckDBPyConnection,
    key_id: str,
    variant: int,
    prompts: list[str],
    compute: Callable[[list[str]], list[str]],
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[str], int]:
    """Outputs for prompts (in order) through the cache keyed by (key_id, prompt, variant), and how many distinct
    prompts were actually computed.

    Identical prompts are computed once; the misses go to compute in batches of batch_size and each finished batch
    is written at once, so an interrupted run keeps its finished batches. progress(done, total) is called after
    each batch with the number of distinct missing prompts computed so far and in total.
    """
    ensure_cache_table(con)
    hashes = [prompt_hash(p) for p in prompts]
    unique: dict[str, str] = {}
    for h, p in zip(hashes, prompts, strict=True):
        unique.setdefault(h, p)
    outputs = lookup_cached(con, key_id, list(unique), variant)
    # Sorted by text, so that consecutive prompts share long prefixes a backend can keep in its KV cache
    missing = sorted((h for h in unique if h not in outputs), key=unique.__getitem__)
    step = max(1, batch_size)
    done = 0
    for start in range(0, len(missing), step):
        batch = missing[start : start + step]
        batch_prompts = [unique[h] for h in batch]
        computed = compute(batch_prompts)
        if len(computed) != len(batch):
            raise GenerationError(f"{key_id} returned {len(computed)} outputs for {len(batch)} prompts")
        _store(con, key_id, variant, list(zip(batch, batch_prompts, computed, strict=True)))
        outputs.update(zip(batch, computed, strict=True))
        done += len(batch)
        if progress is not None:
            progress(done, len(missing))
    return [outputs[h] for h in hashes], done


def generate_cached(
    generator: Generator,
    prompts: list[str],
    max_new_tokens: int,
    con: duckdb.DuckDBPyConnection,
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[str], int]:
    """Greedy generations for prompts through the cache (see cached_outputs), keyed by model and token budget."""
    return cached_outputs(
        con,
        generator.model_id,
        max_new_tokens,
        prompts,
        lambda batch: generate_batch(generator, batch, max_new_tokens),
        batch_size,
        progress,
    )
