"""The Ray engine: Ray Data ``map_batches`` over an actor pool (each actor loads its model once through prag's
factories and runs the same BatchWorker as the local path); the workers write the cache rows as Parquet shards.

Ray is imported only here and only when the engine runs; the caller connects to the cluster first (prag_assets does
it through dagster-ray's resource).
"""

from __future__ import annotations

import pyarrow as pa

from prag_models.compute.shards import ShardFolder, ShardStore
from prag_models.compute.work import BatchWork, BatchWorker, load_model
from prag_models.config.compute import ComputeSettings


class CacheRowsActor:
    """A Ray Data actor: loads the work's model once, then turns each batch of items into cache rows."""

    def __init__(self, work: BatchWork, torch_threads: int = 0) -> None:
        if torch_threads and work.kind == "embed":
            import torch

            torch.set_num_threads(torch_threads)
        self.worker = BatchWorker(work, load_model(work))

    def __call__(self, batch: pa.Table) -> pa.Table:
        """The cache rows of one batch (one chunk of items)."""
        return self.worker.rows(batch)


class RayEngine:
    """Computes chunks on the connected Ray cluster with compute.actors actors of compute.cpus_per_actor CPUs."""

    name = "ray"

    def __init__(self, settings: ComputeSettings) -> None:
        self.settings = settings

    def compute(self, work: BatchWork, chunks: list[pa.Table], store: ShardStore, folder: ShardFolder) -> int:
        """One Ray Data job: every chunk is a block and a batch (batch_size=None), so batches equal the local ones."""
        import ray
        from ray.data import ActorPoolStrategy

        if not ray.is_initialized():
            raise RuntimeError("the Ray engine needs a connected Ray cluster (ray.init) before it computes")
        chunks = [c for c in chunks if c.num_rows]
        if not chunks:
            return 0
        s = self.settings
        rows = ray.data.from_arrow(chunks).map_batches(
            CacheRowsActor,
            fn_constructor_args=(work, s.torch_threads),
            compute=ActorPoolStrategy(size=max(1, min(s.actors, len(chunks)))),
            batch_size=None,
            batch_format="pyarrow",
            num_cpus=s.cpus_per_actor,
            num_gpus=s.gpus_per_actor or None,
        )
        rows.write_parquet(folder.path, filesystem=folder.fs)  # the path inside fs: s3:// query options stay in fs
        return sum(c.num_rows for c in chunks)
