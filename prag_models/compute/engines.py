"""Engines run BatchWork over chunks of items and write the cache rows as Parquet shards: LocalEngine in the run's
process (a user-shard run without Ray), RayEngine (ray_engine.py) on a Ray cluster. A chunk is one batch on every
engine, so the same items meet the model in the same batches wherever they run."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import pyarrow as pa

from prag_models.compute.shards import ShardFolder, ShardStore
from prag_models.compute.work import BatchWork, BatchWorker, load_model


class Engine(Protocol):
    """Computes the cache rows of chunks of work items into a shard folder."""

    name: str

    def compute(self, work: BatchWork, chunks: list[pa.Table], store: ShardStore, folder: ShardFolder) -> int:
        """Write the cache rows of every chunk (one batch each) into folder; returns the number of rows."""
        ...


class LocalEngine:
    """The run's own process: the model comes from the run (loaded once per process) and only on the first chunk."""

    name = "local"

    def __init__(self, model: Callable[[BatchWork], Any] = load_model) -> None:
        self.model = model

    def compute(self, work: BatchWork, chunks: list[pa.Table], store: ShardStore, folder: ShardFolder) -> int:
        """Compute chunk after chunk in this process, one Parquet file each."""
        worker: BatchWorker | None = None
        rows = 0
        for i, chunk in enumerate(chunks):
            worker = worker or BatchWorker(work, self.model(work))
            out = worker.rows(chunk)
            store.write(folder, i, out)
            rows += out.num_rows
        return rows


def rechunk(tables: Iterable[pa.Table | pa.RecordBatch], size: int) -> Iterator[pa.Table]:
    """Item tables cut into chunks of exactly size rows (the last one shorter), in order."""
    pending: list[pa.Table] = []
    count = 0
    for table in tables:
        t = table if isinstance(table, pa.Table) else pa.Table.from_batches([table])
        pending.append(t)
        count += t.num_rows
        while count >= size:
            merged = pa.concat_tables(pending)
            yield merged.slice(0, size).combine_chunks()
            rest = merged.slice(size)
            pending, count = [rest], rest.num_rows
    if count:
        yield pa.concat_tables(pending).combine_chunks()
