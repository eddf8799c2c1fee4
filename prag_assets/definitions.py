"""The one Definitions object that workspace.yaml (and `dagster ... -m prag_assets.definitions`) loads."""

from __future__ import annotations

import dagster as dg

from prag_assets.assets import embeddings, evaluation, generation, lamp_data, retrieval, users
from prag_assets.checks.lamp_checks import lamp_checks
from prag_assets.resources import default_resources

lamp_assets = dg.load_assets_from_modules([lamp_data, embeddings, users, retrieval, generation, evaluation])

# In-process: models load once per run and DuckDB sees one writer; the pool also guards multi-process setups.
defs = dg.Definitions(
    assets=lamp_assets,
    asset_checks=lamp_checks,
    resources=default_resources(),
    executor=dg.in_process_executor,
)
