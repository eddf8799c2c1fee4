"""The code location prag_shards: the task x user-shard assets (group user_shards) that fill the heavy stages'
caches as Parquet shards for partitioned backfills (docs/deployment.md). Loaded beside prag_assets.definitions by
workspace.yaml; `dagster asset materialize -m prag_assets.shard_definitions --partition 'LaMP-2|0' ...` runs one."""

from __future__ import annotations

import dagster as dg

from prag_assets.assets.user_shards import user_shard_assets
from prag_assets.resource_set import default_resources

defs = dg.Definitions(
    assets=user_shard_assets,
    resources=default_resources(),
    executor=dg.in_process_executor,
)
