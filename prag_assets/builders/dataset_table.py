"""One factory for the assets of the real-data retrieval evaluation (group retrieval_eval): unpartitioned, one row set
per configured dataset found under data.real_data_dir, written in one transaction.

An asset built here yields nothing when data.real_data_dir is empty (its downstream steps and checks are skipped)
and fails naming the folder when it holds none of the configured datasets; its materialization reports the row
count and column schema of its table (every dataset) and what its run returns."""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pandas as pd

from prag_assets.builders.task_table import CODE_VERSION
from prag_assets.metadata import keyed_table, table_metadata
from prag_assets.partitions import DUCKDB_POOL, single_run
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.mlflow_registry import MlflowResource
from prag_assets.resources.models import ModelsResource
from prag_models.config.settings import Settings
from prag_models.stages import real_data_build as build
from prag_models.storage.store import replace_many

GROUP = "retrieval_eval"


def run_datasets(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext, settings: Settings) -> list[str]:
    """Configured datasets found under data.real_data_dir; [] (logged) when it is not set; ValueError if none."""
    return build.configured_datasets(settings, context.log.warning)


@dataclass
class DatasetRun:
    """What one run of a dataset asset gets: the context, the settings, the datasets found, DuckDB, models, MLflow."""

    context: dg.AssetExecutionContext
    settings: Settings
    datasets: list[str]
    duckdb: DuckDBResource
    models: ModelsResource
    mlflow: MlflowResource

    def write_each(
        self,
        table: str,
        rows: Callable[[Any, str], tuple[pd.DataFrame, dict[str, Any]]],
        prepare: Callable[[Any], None] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Each dataset's rows of `table` from rows(con, dataset) in one connection (after prepare(con)), written in
        one transaction; returns each dataset's statistics."""
        writes, stats = [], {}
        with self.duckdb.connect() as con:
            if prepare is not None:
                prepare(con)
            for dataset in self.datasets:
                frame, stats[dataset] = rows(con, dataset)
                writes.append((table, frame, {"dataset": dataset}))
            replace_many(con, writes)
        return stats


def per_dataset(stats: dict[str, dict[str, Any]]) -> dict[str, dg.MetadataValue]:
    """Each dataset's statistics as one table, a row per dataset."""
    return {"per_dataset": keyed_table(stats, "dataset")}


def dataset_asset(
    *,
    name: str,
    table: str,
    description: str,
    run: Callable[[DatasetRun], dict[str, Any]],
    deps: Sequence[Any] = (),
    kinds: Sequence[str] = ("duckdb",),
    uses: Sequence[str] = (),
) -> dg.AssetsDefinition:
    """An asset of group retrieval_eval writing `table` (among others) through `run` when datasets are configured
    (uses: the resources it needs beside settings and DuckDB, "models" and/or "mlflow"); its metadata: the table's row
    count and column schema, then what `run` returns."""

    @dg.asset(name=name, deps=list(deps), kinds=set(kinds), description=description, group_name=GROUP,
              required_resource_keys={"prag_settings", "duckdb", *uses}, backfill_policy=single_run, pool=DUCKDB_POOL,
              output_required=False, code_version=CODE_VERSION)  # fmt: skip
    def _asset(context: dg.AssetExecutionContext) -> Iterator[dg.MaterializeResult]:
        resources = context.resources
        settings = resources.prag_settings.get()
        datasets = run_datasets(context, settings)
        if not datasets:  # not configured: no materialization, downstream steps skip
            return
        used = {key: getattr(resources, key) if key in uses else None for key in ("models", "mlflow")}
        metadata = run(DatasetRun(context, settings, datasets, resources.duckdb, **used))
        with resources.duckdb.connect() as con:
            written = table_metadata(con, table, None)
        yield dg.MaterializeResult(metadata={**written, **metadata})

    return _asset
