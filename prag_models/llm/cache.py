"""LLM output cache in DuckDB: the same prompt with the same model and budget (or label set) is never run twice."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

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
    users VARCHAR[],
    PRIMARY KEY (generator_id, prompt_hash, max_new_tokens)
)
"""
#: The provenance column: the ids of the users whose data (input, documents, gold) the cached prompt shows; `prag
#: forget` deletes a row by it. NULL: not known (a row written before provenance, or by a shard), deleted by every
#: erasure; an empty list: no user's data.
USERS_COLUMN = "users"
#: Whose data each prompt shows, in the order of the prompts (see USERS_COLUMN; None: not known).
Provenance = Sequence[Iterable[str] | None]


def prompt_hash(prompt: str) -> str:
    """sha256 hex digest of the prompt text, the cache key."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def ensure_cache_table(con: duckdb.DuckDBPyConnection) -> None:
    """Create the generation_cache table if it does not exist; give an older one the provenance column (NULL)."""
    con.execute(_DDL)
    sql = "SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = 'main' "
    if not con.execute(sql + "AND table_name = ? AND column_name = ?", [CACHE_TABLE, USERS_COLUMN]).fetchall()[0][0]:
        con.execute(f"ALTER TABLE {CACHE_TABLE} ADD COLUMN {USERS_COLUMN} VARCHAR[]")


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
    items: Sequence[tuple[str, str, str, list[str] | None]],
) -> None:
    """Insert (hash, prompt, output, users) rows; rows already present are left as they are."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    con.executemany(
        f"INSERT INTO {CACHE_TABLE} (generator_id, prompt_hash, max_new_tokens, prompt, output, created_at, "
        f"{USERS_COLUMN}) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [(generator_id, h, max_new_tokens, p, out, now, users) for h, p, out, users in items],
    )


def _provenance(hashes: Sequence[str], users: Provenance | None) -> dict[str, list[str] | None]:
    """Each distinct prompt hash's users (the union over identical prompts), sorted; None where not known."""
    if users is None:
        return dict.fromkeys(hashes)
    if len(users) != len(hashes):
        raise ValueError(f"provenance of {len(users)} prompts for {len(hashes)} prompts")
    merged: dict[str, set[str] | None] = dict.fromkeys(hashes)
    for h, who in zip(hashes, users, strict=True):
        if who is not None:
            merged[h] = (merged[h] or set()) | {str(u) for u in who}
    return {h: None if who is None else sorted(who) for h, who in merged.items()}


def record_provenance(
    con: duckdb.DuckDBPyConnection, generator_id: str, max_new_tokens: int, users: dict[str, list[str]]
) -> None:
    """Add users to the provenance of cached rows that lack them (rows cached before provenance, or by a shard):
    a prompt's text is the same whoever asks, so the users whose data it shows are known from any caller."""
    if not users:
        return
    frame = pa.table({"prompt_hash": pa.array(list(users), pa.string()),
                      "users": pa.array(list(users.values()), pa.list_(pa.string()))})  # fmt: skip
    con.register("_prag_provenance", frame)
    try:
        con.execute(
            f"UPDATE {CACHE_TABLE} c SET {USERS_COLUMN} = list_sort(list_distinct(list_concat("
            f"coalesce(c.{USERS_COLUMN}, []), p.users))) FROM _prag_provenance p WHERE c.generator_id = ? "
            f"AND c.max_new_tokens = ? AND c.prompt_hash = p.prompt_hash AND (c.{USERS_COLUMN} IS NULL OR NOT "
            f"list_has_all(c.{USERS_COLUMN}, p.users))",
            [generator_id, max_new_tokens],
        )
    finally:
        con.unregister("_prag_provenance")


def cached_outputs(
    con: duckdb.DuckDBPyConnection,
    key_id: str,
    variant: int,
    prompts: list[str],
    compute: Callable[[list[str]], list[str]],
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
    users: Provenance | None = None,
) -> tuple[list[str], int]:
    """Outputs for prompts (in order) through the cache keyed by (key_id, prompt, variant), and how many distinct
    prompts were actually computed.

    Identical prompts are computed once; the misses go to compute in batches of batch_size and each finished batch
    is written at once, so an interrupted run keeps its finished batches. progress(done, total) is called after
    each batch with the number of distinct missing prompts computed so far and in total. ``users``: the ids of the
    users whose data each prompt shows (USERS_COLUMN), recorded on new rows and added to cached ones.
    """
    ensure_cache_table(con)
    hashes = [prompt_hash(p) for p in prompts]
    unique: dict[str, str] = {}
    for h, p in zip(hashes, prompts, strict=True):
        unique.setdefault(h, p)
    who = _provenance(hashes, users)
    outputs = lookup_cached(con, key_id, list(unique), variant)
    record_provenance(con, key_id, variant, {h: who[h] for h in outputs if who[h] is not None})
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
        _store(con, key_id, variant, list(zip(batch, batch_prompts, computed, [who[h] for h in batch], strict=True)))
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
    users: Provenance | None = None,
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
        users,
    )
