"""The cache misses of the heavy stages as engine work: for a task (and optionally only a shard of its users), the
BatchWork and the chunks of items the stage would compute — built with the stage's own functions, so the prompts
and cache keys are exactly the stage's and a stage run afterwards finds every item cached.

Stages: ``documents`` and ``queries`` (embedding_cache), ``feedback`` (CFRAG feedback labels), ``generations`` and
``pbr`` (PBR's P-PRF expansions), all three in generation_cache.

A shard (i, n) of a task: the LLM stages take the samples of the users with sha256(user_id) mod n = i; the embedding
stages take every n-th batch (from the i-th) of the texts the unsharded stage would embed — the texts of an encoder
batch pad each other, so only the unsharded batches give the unsharded run's vectors bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import pyarrow as pa

from prag_models.compute.engines import Engine, rechunk
from prag_models.compute.shards import ShardStore, load_folders, shard_root, users_of_shard
from prag_models.compute.work import BatchWork, prompt_items
from prag_models.config.settings import Settings
from prag_models.data.source import llm_eval_sample_ids
from prag_models.generation.answers import answer_key
from prag_models.llm.cache import CACHE_TABLE as GENERATION_CACHE
from prag_models.llm.cache import lookup_cached, prompt_hash
from prag_models.methods.cfrag.feedback import feedback_prompts, feedback_todo
from prag_models.methods.cfrag.feedback_labels import (
    GOLD_BATCH,
    feedback_max_new_tokens,
    gold_loglik_key,
    gold_prompts,
)
from prag_models.methods.cfrag.feedback_probe import candidate_gains, probe_sample_ids
from prag_models.methods.pbr import expansion_prompts
from prag_models.stages.embeddings import DOCUMENT_SOURCE, QUERY_SOURCE
from prag_models.stages.generation import generation_jobs
from prag_models.stages.pbr_lamp import lamp_expansion_items, lamp_pbr_settings
from prag_models.stages.retrieval import load_task_inputs
from prag_models.storage.store import table_exists
from prag_models.text.embedder import embedder_key
from prag_models.text.embedding_cache import CACHE_TABLE as EMBEDDING_CACHE
from prag_models.text.embedding_cache import missing_batches, missing_query

#: Each stage's cache table.
STAGE_CACHE = {"documents": EMBEDDING_CACHE, "queries": EMBEDDING_CACHE, "feedback": GENERATION_CACHE,
               "generations": GENERATION_CACHE, "pbr": GENERATION_CACHE}  # fmt: skip
#: Texts per embedding batch: embed_missing's chunk (its default), so every engine embeds the local path's batches.
EMBED_CHUNK = 512

Work = list[tuple[BatchWork, list[pa.Table]]]
Shard = tuple[int, int] | None  # (i, n): shard i of n, or None for the whole task


class Models(Protocol):
    """Where the run's loaded models come from (prag_assets' ModelsResource)."""

    def generator(self) -> Any:
        """The configured generator (its tokenizer budgets the prompts; its id keys the cache)."""
        ...


def task_users(con: Any, task: str) -> list[str]:
    """Every user of a task (samples and profiles), sorted."""
    sql = "SELECT user_id FROM lamp_samples WHERE task = ? UNION SELECT user_id FROM profile_documents WHERE task = ?"
    return sorted(u for (u,) in con.execute(sql, [task, task]).fetchall())


def shard_users(con: Any, task: str, shard: Shard) -> list[str] | None:
    """The users of a task's shard (None: every user)."""
    return None if shard is None else users_of_shard(task_users(con, task), *shard)


def embedding_work(con: Any, stage: str, task: str, settings: Settings, shard: Shard = None) -> Work:
    """The texts of a task's documents or queries that embedding_cache lacks (a shard: every n-th batch of them)."""
    source, params = (DOCUMENT_SOURCE if stage == "documents" else QUERY_SOURCE), [task]
    model_id = embedder_key(settings.embedder)  # names the backend: int8 vectors are not fp32's
    if table_exists(con, EMBEDDING_CACHE):
        sql, args = missing_query(source, params, model_id)
    else:  # nothing cached yet (a read-only connection cannot create the table)
        sql, args = f"SELECT content_hash, any_value(text) AS text FROM ({source}) GROUP BY content_hash", params
    # The batches exactly as embed_missing embeds them: the same batches give bit-identical vectors.
    batches = missing_batches(con, sql, args, EMBED_CHUNK)
    chunks = [pa.Table.from_batches([b.rename_columns(["key", "text"])]) for b in batches]
    if shard is not None:
        chunks = chunks[shard[0] :: shard[1]]
    return [(BatchWork("embed", settings.embedder, model_id, batch_size=EMBED_CHUNK), chunks)]


def missing_prompts(con: Any, work: BatchWork, prompts: Sequence[str]) -> list[pa.Table]:
    """The distinct prompts generation_cache lacks under the work's key, sorted (as cached_outputs computes them:
    neighbours share prefixes), in chunks of the work's batch size."""
    unique = {prompt_hash(p): p for p in prompts}
    cached = lookup_cached(con, work.key_id, list(unique), work.variant) if table_exists(con, GENERATION_CACHE) else {}
    missing = sorted(p for h, p in unique.items() if h not in cached)
    return list(rechunk([prompt_items(missing)], max(1, work.batch_size))) if missing else []


def _batch(settings: Settings, default: int) -> int:
    """Prompts per batch: compute.batch_size, else the stage's own."""
    return settings.compute.batch_size or default


def feedback_work(con: Any, task: str, settings: Settings, models: Models, shard: Shard = None) -> Work:
    """The feedback prompts of a task's unlabelled (sample, candidate) pairs, as feedback_scores caches them (none for
    the oracle teacher, which calls no LLM)."""
    if settings.cfrag.feedback_signal == "oracle":
        return []
    generator = models.generator()
    inputs, todo = feedback_todo(con, task, settings, generator.model_id, shard_users(con, task, shard))
    probe = probe_sample_ids(inputs.samples["sample_id"].tolist(), candidate_gains(con, task, inputs), settings)
    if probe is not None and not settings.cfrag.feedback_force:  # the rest only if the probe shows headroom
        todo = [pair for pair in todo if pair[0].sample_id in set(probe)]
    prompts, golds = feedback_prompts(task, inputs, todo, generator, settings)
    if settings.cfrag.feedback_signal == "gold_loglik":
        work = BatchWork("gold_loglik", settings.generator, gold_loglik_key(generator),
                         batch_size=_batch(settings, GOLD_BATCH))  # fmt: skip
        return [(work, missing_prompts(con, work, gold_prompts(prompts, golds)))]
    budget = feedback_max_new_tokens(task, settings)
    key, variant = answer_key(task, generator, settings.generator, budget)
    work = BatchWork("answer", settings.generator, key, variant, task, budget,
                     _batch(settings, settings.generator.batch_size))  # fmt: skip
    return [(work, missing_prompts(con, work, prompts))]


def generation_work(con: Any, task: str, settings: Settings, models: Models, shard: Shard = None) -> Work:
    """The LaMP prompts of a task's LLM-evaluation samples, as generation_rows answers them."""
    generator = models.generator()
    _, jobs = generation_jobs(con, task, settings, generator, shard_users(con, task, shard))
    key, variant = answer_key(task, generator, settings.generator)
    work = BatchWork("answer", settings.generator, key, variant, task, None,
                     _batch(settings, settings.generator.batch_size))  # fmt: skip
    return [(work, missing_prompts(con, work, [j.prompt for j in jobs]))]


def pbr_work(con: Any, task: str, settings: Settings, models: Models, shard: Shard = None) -> Work:
    """PBR's two P-PRF prompts per LLM-evaluation sample, as pbr_lamp_retrievals generates them (none when pbr is
    not among retrieval.methods)."""
    if "pbr" not in settings.retrieval.methods:
        return []
    generator = models.generator()
    pbr = lamp_pbr_settings(settings.pbr)
    index, samples, _ = load_task_inputs(con, task, False, default_share=settings.privacy.default_share)
    subset = samples[samples["sample_id"].isin(llm_eval_sample_ids(samples["sample_id"], settings))]
    users = shard_users(con, task, shard)
    if users is not None:
        subset = subset[subset["user_id"].isin(set(users))]
    items = lamp_expansion_items(index, subset, pbr)
    utterances, reasoning = expansion_prompts(generator, items, pbr.num_pseudo, pbr.lamp_history_tokens)
    work = BatchWork("generate", settings.generator, generator.model_id, pbr.lamp_max_new_tokens,
                     batch_size=_batch(settings, settings.generator.batch_size))  # fmt: skip
    return [(work, missing_prompts(con, work, utterances + reasoning))]


def stage_work(con: Any, stage: str, task: str, settings: Settings, models: Models, shard: Shard = None) -> Work:
    """The engine work of one stage on one task (or one shard of it)."""
    if stage in ("documents", "queries"):
        return embedding_work(con, stage, task, settings, shard)
    builders = {"feedback": feedback_work, "generations": generation_work, "pbr": pbr_work}
    if stage not in builders:
        raise ValueError(f"unknown stage {stage!r}; known: {sorted(STAGE_CACHE)}")
    return builders[stage](con, task, settings, models, shard)


def fill_caches(con: Any, stage: str, tasks: Sequence[str], settings: Settings, models: Models,
                engine: Engine | None = None, shard: Shard = None, load: bool = True) -> dict[str, Any]:  # fmt: skip
    """Before a heavy stage: load the finished shard folders of its cache (written by user-shard runs); with an
    engine, compute the stage's missing items of the tasks (or of one shard) there — one job per BatchWork for all
    tasks — and load them as well. With load=False (a user-shard run, read-only on DuckDB) the computed folders
    stay for the run that holds the file."""
    table = STAGE_CACHE[stage]
    store = ShardStore(shard_root(settings))
    stats: dict[str, Any] = {"engine": engine.name if engine else settings.compute.engine}
    if load:
        stats.update({f"pending_{k}": v for k, v in load_folders(con, store, table, store.pending(table)).items()})
    if engine is None:
        return stats
    grouped: dict[BatchWork, list[pa.Table]] = {}
    for task in tasks:
        for work, chunks in stage_work(con, stage, task, settings, models, shard):
            grouped.setdefault(work, []).extend(chunks)
    folders, computed = [], 0
    for work, chunks in grouped.items():
        if chunks:
            folder = store.new_folder(table, f"{stage}.{'+'.join(tasks)}")
            computed += engine.compute(work, chunks, store, folder)
            store.finish(folder)
            folders.append(folder)
    stats["computed"] = computed
    if load:
        stats.update(load_folders(con, store, table, folders))
    else:
        stats["shard_folders"] = [f.uri for f in folders]
    return stats
