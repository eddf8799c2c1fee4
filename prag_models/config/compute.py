"""Compute settings (docs/deployment.md): where the heavy per-item work runs — in the run's process or on Ray — and
how user shards split a task for partitioned backfills."""

from __future__ import annotations

from typing import Literal

from prag_models.config.sources import Section


class ComputeSettings(Section):
    """The engine of the heavy per-item stages (document embeddings, feedback labels, generations, PBR P-PRF)."""

    #: local: in the run's process, as always; ray: cache misses computed by Ray Data map_batches over actor pools,
    #: written as Parquet shards and loaded into DuckDB by the asset (DuckDB stays the single writer).
    engine: Literal["local", "ray"] = "local"
    #: Empty: start a local Ray cluster in the run's process. Else an existing cluster: "auto" (this node belongs to
    #: it), "<head>:6379" (GCS address, from a cluster node) or "ray://<head>:10001" (Ray Client, e.g. KubeRay's
    #: head service).
    ray_address: str = ""
    ray_num_cpus: int = 0  # CPUs of the local cluster (0 = every core); ignored with ray_address
    ray_object_store_mb: int = 0  # object store of the local cluster (0 = Ray's default share of the memory)
    actors: int = 2  # actors per stage's pool (each loads its model once)
    cpus_per_actor: float = 1.0
    gpus_per_actor: float = 0.0  # e.g. 1 for in-process vLLM actors on a GPU node
    #: torch threads of an embedding actor (0 = Ray's default: its CPUs). The float sums of a small batch depend on
    #: the thread count, so vectors equal the local engine's bit for bit only with the local run's thread count.
    torch_threads: int = 0
    #: Prompts per map_batches batch (0 = generator.batch_size); document batches follow the embedding chunk (512).
    batch_size: int = 0
    #: User shards of the task x user-shard partitions (group user_shards): shard = sha256(user_id) mod user_shards.
    #: Read when the definitions load: changing it changes the partition keys.
    user_shards: int = 4
    #: Folder (or s3:// URI) where workers write Parquet shards; empty = <home>/shards. Must be visible to every Ray
    #: worker and to the run that loads them (a shared volume or object storage on a cluster).
    shard_dir: str = ""
