"""Small helpers shared by the assets: which tasks a run covers, metadata previews, progress logging."""

from collections.abc import Callable

import dagster as dg
import pandas as pd

from prag_models.config import Settings


def run_tasks(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext, settings: Settings) -> list[str]:
    """The tasks this run materializes: its partition keys that are also configured in data.tasks."""
    keys = list(context.partition_keys) if context.has_partition_key_range or context.has_partition_key else []
    keys = keys or list(settings.data.tasks)
    chosen = [k for k in keys if k in settings.data.tasks]
    skipped = [k for k in keys if k not in settings.data.tasks]
    if skipped:
        context.log.warning(f"tasks {skipped} are not in data.tasks {list(settings.data.tasks)}: skipped")
    return chosen


def preview(df: pd.DataFrame, rows: int = 5) -> dg.MetadataValue:
    """A markdown preview of the first rows of a table."""
    return dg.MetadataValue.md(df.head(rows).to_markdown(index=False) if len(df) else "_empty_")


def progress_logger(context: dg.AssetExecutionContext, what: str, every: float = 0.1) -> Callable[[int, int], None]:
    """A progress callback logging 'what: done/total' about every 10 %."""
    state = {"last": -1.0}

    def log(done: int, total: int) -> None:
        frac = done / total if total else 1.0
        if frac - state["last"] >= every or done == total:
            state["last"] = frac
            context.log.info(f"{what}: {done}/{total} ({frac:.0%})")

    return log


def table_metadata(con, table: str, tasks: list[str] | None) -> dict[str, dg.MetadataValue]:
    """`dagster/row_count` (rows of the run's tasks) and `dagster/column_schema` of a DuckDB table the asset wrote."""
    from prag_models.catalog import table_columns, task_row_count

    schema = dg.TableSchema(columns=[dg.TableColumn(name, kind.lower()) for name, kind in table_columns(con, table)])
    return {
        "dagster/row_count": dg.MetadataValue.int(task_row_count(con, table, tasks)),
        "dagster/column_schema": dg.MetadataValue.table_schema(schema),
        "duckdb_table": dg.MetadataValue.text(table),
    }
