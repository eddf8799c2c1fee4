"""Group user_shards (code location prag_shards, prag_assets/automation/shard_definitions.py): the heavy stages' cache
misses of one task x user shard, computed on the configured engine and written as Parquet shards — never into
DuckDB. The LLM stages take the samples of the users with sha256(user_id) mod compute.user_shards = shard; the
embedding stage takes every n-th of the batches the unsharded stage would embed (an encoder's batch pads its texts:
only those batches give its vectors bit for bit).

A backfill of these partitions spreads one task over many workers (each run reads DuckDB read-only); the task
assets (document_embeddings, query_embeddings, feedback_labels, pbr_lamp_retrievals, generations) then load every
finished shard into their cache table — DuckDB stays the single writer — and find each item cached, so their
tables equal the unsharded run's. The order follows the data: embedding_shards before the embedding assets,
feedback and PBR shards once the CFRAG neighbours and the embeddings exist, generation_shards once the retrievals do.
Their own code location keeps the task-partitioned graph's `--select '*'` runs free of a second partitioning; the
UI draws their dependencies across the two locations. A single machine gains nothing from them: the location holds
them only when compute.engine = "ray" (prag_assets/automation/shard_definitions.py), and a catalog that shows them
expects most partitions unmaterialized until a backfill runs.
"""


from typing import Any

import dagster as dg
from dagster_ray import RayResource

from prag_assets.execution import fill_user_shard
from prag_assets.metadata import keyed_table
from prag_assets.partitions import task_partitions
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.models import ModelsResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import ConfigError, load_settings

GROUP = "user_shards"
SHARD = "user_shard"
SHARDS_FINISHED = "shard_folders_finished"

#: name -> (prag_models.stages.cache_work stages, task assets of the code location prag it reads, description)
SHARD_ASSETS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "embedding_shards": (
        ("documents", "queries"), ("profile_documents", "lamp_samples"),
        "Every n-th batch of the documents' and queries' texts embedding_cache lacks, embedded, as Parquet shards "
        "(loaded by document_embeddings / query_embeddings).",
    ),
    "feedback_label_shards": (
        ("feedback",), ("cfrag_similar_users", "query_embeddings", "document_embeddings"),
        "CFRAG feedback scores of the shard's users' selected train samples, as Parquet shards of generation_cache "
        "rows (loaded by feedback_labels).",
    ),
    "pbr_expansion_shards": (
        ("pbr",), ("query_embeddings", "document_embeddings"),
        "PBR P-PRF generations of the shard's users' LLM-evaluation samples, as Parquet shards of generation_cache "
        "rows (loaded by pbr_lamp_retrievals).",
    ),
    "generation_shards": (
        ("generations",), ("baseline_retrievals", "clusterrag_retrievals", "cfrag_retrievals", "pbr_lamp_retrievals"),
        "Answers to the shard's users' LaMP prompts (every configured method), as Parquet shards of generation_cache "
        "rows (loaded by generations).",
    ),
}  # fmt: skip


def shard_partitions(n: int) -> dg.MultiPartitionsDefinition:
    """task x user shard ("0" … "n-1")."""
    return dg.MultiPartitionsDefinition(
        {"task": task_partitions, SHARD: dg.StaticPartitionsDefinition([str(i) for i in range(n)])}
    )


def shard_asset(name: str, n: int) -> dg.AssetsDefinition:
    """The task x user-shard asset of SHARD_ASSETS[name] over n user shards; its deps are task assets of the code
    location prag (each task partition feeds its shards)."""
    stages, deps, description = SHARD_ASSETS[name]

    @dg.asset(
        name=name,
        group_name=GROUP,
        partitions_def=shard_partitions(n),
        backfill_policy=dg.BackfillPolicy.multi_run(1),
        deps=[dg.AssetDep(d, partition_mapping=dg.MultiToSingleDimensionPartitionMapping("task")) for d in deps],
        kinds={"parquet", "ray"},
        description=description + " Only a partitioned backfill fills it (docs/deployment.md): partitions stay "
        "unmaterialized until one runs.",
        check_specs=[dg.AssetCheckSpec(SHARDS_FINISHED, asset=name, description="Every Parquet shard folder this "
                                       "run wrote is finished (its _SUCCESS marker is there), so the task asset will "
                                       "load it.")],  # fmt: skip
    )
    def _asset(
        context: dg.AssetExecutionContext,
        prag_settings: PragSettingsResource,
        duckdb: DuckDBResource,
        models: ModelsResource,
        ray: RayResource,
    ) -> dg.MaterializeResult:
        keys = context.partition_key.keys_by_dimension  # type: ignore[union-attr]
        task, shard = keys["task"], int(keys[SHARD])
        settings = prag_settings.get()
        if settings.compute.user_shards != n:
            raise ConfigError(
                f"compute.user_shards is {settings.compute.user_shards} for this run but the definitions were loaded "
                f"with {n} user shards: reload the code location (the shards of a run must match its partition keys)"
            )
        filled = fill_user_shard(context, duckdb, stages, task, (shard, n), settings, models, ray)
        users, source, stats = filled["users"], filled["source"], filled["stats"]
        context.log.info(f"{task} user shard {shard} of {n} ({len(users)} users, read {source}): {stats}")
        return dg.MaterializeResult(
            metadata={
                "task": task,
                "user_shard": f"{shard} of {n}",
                "users": len(users),
                "engine": filled["engine"],
                "computed": sum(s["computed"] for s in stats.values()),
                "per_stage": keyed_table(stats, "stage"),
            },
            check_results=[finished_check(settings, stats)],
        )

    return _asset


def finished_check(settings: Any, stats: dict[str, dict]) -> dg.AssetCheckResult:
    """Whether every shard folder of the run is among the store's finished folders of its cache table."""
    from prag_models.compute.shards import ShardStore, shard_root
    from prag_models.stages.cache_work import STAGE_CACHE

    store = ShardStore(shard_root(settings))
    written = {stage: s.get("shard_folders", []) for stage, s in stats.items()}
    finished = {stage: {f.uri for f in store.pending(STAGE_CACHE[stage])} for stage in written}
    missing = [uri for stage, uris in written.items() for uri in uris if uri not in finished[stage]]
    return dg.AssetCheckResult(
        check_name=SHARDS_FINISHED,
        passed=not missing,
        metadata={"folders": sum(len(u) for u in written.values()), "unfinished": ", ".join(missing) or "none"},
    )


def shard_assets(n: int) -> list[dg.AssetsDefinition]:
    """The four task x user-shard assets over n user shards."""
    return [shard_asset(name, n) for name in SHARD_ASSETS]


def configured_shard_assets() -> list[dg.AssetsDefinition]:
    """The shard assets over compute.user_shards as the definitions load (the environment and prag.toml of the code
    location) when compute.engine is ray; none on a single machine, where they would only show empty partitions."""
    compute = load_settings().compute
    return shard_assets(compute.user_shards) if compute.engine == "ray" else []


user_shard_assets = configured_shard_assets()
