"""The per-item work of the heavy stages as one picklable description (BatchWork) and one function per kind that
computes a batch of it on a loaded model (BatchWorker). The run's process and a Ray actor call the same code: the
engine only decides where it runs. Results are rows of the stage's cache table (embedding_cache, generation_cache)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from prag_models.config.settings import EmbedderSettings, GeneratorSettings
from prag_models.generation.answers import answer_batches
from prag_models.llm.base import generate_batch
from prag_models.llm.cache import CACHE_TABLE as GENERATION_CACHE
from prag_models.llm.cache import prompt_hash
from prag_models.methods.cfrag.feedback_labels import gold_loglik_batch
from prag_models.storage.store import matrix_to_column
from prag_models.text.embedding_cache import CACHE_TABLE as EMBEDDING_CACHE

Kind = Literal["embed", "answer", "generate", "gold_loglik"]

#: Arrow schema of the rows each cache table receives (the Parquet shards hold exactly these columns).
CACHE_SCHEMAS = {
    EMBEDDING_CACHE: pa.schema([("model_id", pa.string()), ("content_hash", pa.string()),
                                ("embedding", pa.list_(pa.float32()))]),
    GENERATION_CACHE: pa.schema([("generator_id", pa.string()), ("prompt_hash", pa.string()),
                                 ("max_new_tokens", pa.int32()), ("prompt", pa.string()), ("output", pa.string()),
                                 ("created_at", pa.timestamp("us"))]),
}  # fmt: skip


@dataclass(frozen=True)
class BatchWork:
    """What a batch computes, small and picklable (it travels to Ray actors): the kind, the model's settings and the
    cache key the rows are stored under (computed by the run, so every engine stores under the same key)."""

    kind: Kind  # embed: embedder.embed; answer: answer_batches; generate: generator.generate; gold_loglik
    model: EmbedderSettings | GeneratorSettings
    key_id: str  # embedding_cache.model_id or generation_cache.generator_id
    variant: int = 0  # generation_cache.max_new_tokens (the token budget of generate; 0 otherwise)
    task: str = ""  # answer: the task whose prompts are answered
    max_new_tokens: int | None = None  # answer: an explicit budget (feedback labels), else the task's
    batch_size: int = 8  # items per batch

    @property
    def cache_table(self) -> str:
        """The DuckDB cache table the rows belong to."""
        return EMBEDDING_CACHE if self.kind == "embed" else GENERATION_CACHE


def load_model(work: BatchWork) -> Any:
    """The model a BatchWork runs on, through prag's factories (the embedder once per process)."""
    if work.kind == "embed":
        from prag_models.text.embedder import load_embedder

        return load_embedder(work.model)
    from prag_models.llm.factory import make_generator

    return make_generator(work.model)


def item_table(keys: list[str], texts: list[str]) -> pa.Table:
    """Work items as the engines take them: key (content or prompt hash) and text."""
    return pa.table({"key": pa.array(keys, pa.string()), "text": pa.array(texts, pa.string())})


def prompt_items(prompts: list[str]) -> pa.Table:
    """Work items of prompts keyed by their prompt hash."""
    return item_table([prompt_hash(p) for p in prompts], prompts)


class BatchWorker:
    """Computes batches of one BatchWork on a loaded model and returns them as cache rows."""

    def __init__(self, work: BatchWork, model: Any) -> None:
        self.work = work
        if work.kind == "embed":
            self._compute = model.embed
        elif work.kind == "answer":
            self._compute = answer_batches(work.task, model, work.model, work.max_new_tokens)
        elif work.kind == "generate":
            self._compute = partial(generate_batch, model, max_new_tokens=work.variant)
        elif work.kind == "gold_loglik":
            self._compute = partial(gold_loglik_batch, model)
        else:
            raise ValueError(f"unknown batch work kind {work.kind!r}")

    def rows(self, items: pa.Table) -> pa.Table:
        """The cache rows of one batch of items (columns key, text)."""
        keys, texts = items["key"].combine_chunks(), items["text"].to_pylist()
        n, w = len(texts), self.work
        if w.kind == "embed":
            vectors = np.asarray(self._compute(texts), dtype=np.float32)
            if not np.isfinite(vectors).all():
                raise ValueError(f"embedder {w.key_id!r} returned non-finite values")
            column = matrix_to_column(vectors).cast(pa.list_(pa.float32()))
            columns = {"model_id": [w.key_id] * n, "content_hash": keys, "embedding": column}
            return pa.Table.from_pydict(columns, schema=CACHE_SCHEMAS[EMBEDDING_CACHE])
        outputs = list(self._compute(texts))
        if len(outputs) != n:
            raise RuntimeError(f"{w.key_id} returned {len(outputs)} outputs for {n} prompts")
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        columns = {"generator_id": [w.key_id] * n, "prompt_hash": keys, "max_new_tokens": [w.variant] * n,
                   "prompt": texts, "output": outputs, "created_at": [now] * n}  # fmt: skip
        return pa.Table.from_pydict(columns, schema=CACHE_SCHEMAS[GENERATION_CACHE])
