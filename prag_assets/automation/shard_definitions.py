"""The code location prag_shards: the task x user-shard assets (group user_shards) that fill the heavy stages'
caches as Parquet shards for partitioned backfills (docs/deployment.md). Loaded beside prag_assets.definitions by
workspace.yaml; `dagster asset materialize -m prag_assets.automation.shard_definitions --partition 'LaMP-2|0' ...`
runs one. The location holds them only when compute.engine = "ray" (a single machine's catalog would show 24 empty
partitions of assets it never needs)."""

from __future__ import annotations

import dagster as dg

from prag_assets.assets import user_shards
from prag_assets.assets.user_shards import user_shard_assets
from prag_assets.builders.code_versions import GROUP_SECTIONS, OWNERS, code_version, settings_sections
from prag_assets.resources.resource_set import default_resources
from prag_models.config.settings import load_settings

_version = code_version(user_shards, settings_sections(load_settings(), GROUP_SECTIONS["user_shards"]))

defs = dg.Definitions(
    assets=dg.map_asset_specs(lambda s: s.replace_attributes(code_version=_version, owners=OWNERS), user_shard_assets),
    resources=default_resources(),
    executor=dg.in_process_executor,
)
