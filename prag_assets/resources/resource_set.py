"""The resource set the definitions (and tests) use: settings, DuckDB, models, MLflow and Ray over one settings object.

Every resource takes the one PragSettingsResource; this module alone imports them all.
"""

from __future__ import annotations

import dagster as dg
from dagster_ray import Lifecycle

from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_assets.resources.models import ModelsResource
from prag_assets.resources.ray_cluster import PragRay
from prag_assets.resources.settings import PragSettingsResource


def default_resources(config_file: str = "", home: str = "") -> dict[str, dg.ConfigurableResource]:
    """The resource set the definitions use; tests pass their own config file and home."""
    settings = PragSettingsResource(config_file=config_file, home=home)
    return {
        "prag_settings": settings,
        "duckdb": DuckDBResource(settings=settings),
        "models": ModelsResource(settings=settings),
        "mlflow": MlflowResource(settings=settings),
        # connects only when compute.engine = ray; lifecycle is passed explicitly because Dagster builds a resource's
        # run config from its set fields and the class defaults of nested configs (connect=True), not PragRay's
        # default_factory: without it every run started a local Ray cluster
        "ray": PragRay(settings=settings, lifecycle=Lifecycle(connect=False)),
    }
