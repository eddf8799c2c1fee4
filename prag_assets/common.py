"""Small helpers shared by the assets: which tasks a run covers, metadata previews, progress logging."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg
import pandas as pd

from prag_models.config.settings import Settings


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
    from prag_models.storage.catalog import table_columns, task_row_count

    schema = dg.TableSchema(columns=[dg.TableColumn(name, kind.lower()) for name, kind in table_columns(con, table)])
    return {
        "dagster/row_count": dg.MetadataValue.int(task_row_count(con, table, tasks)),
        "dagster/column_schema": dg.MetadataValue.table_schema(schema),
        "duckdb_table": dg.MetadataValue.text(table),
    }


def _column_type(dtype: object) -> str:
    """The Dagster column type of a pandas dtype."""
    kind = getattr(dtype, "kind", "O")
    return {"b": "bool", "i": "int", "u": "int", "f": "float", "M": "datetime"}.get(kind, "string")


def _cell(value: object, kind: str) -> object:
    """One cell as a JSON scalar (floats rounded to 4 places, missing values as None)."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    return {"bool": bool, "int": int, "float": lambda v: round(float(v), 4)}.get(kind, str)(value)


def frame_table(df: pd.DataFrame, descriptions: dict[str, str] | None = None) -> dg.MetadataValue:
    """A DataFrame as a Dagster table with its column schema, so it reads as a table in the UI."""
    kinds = {c: _column_type(df[c].dtype) for c in df.columns}
    schema = dg.TableSchema(
        columns=[dg.TableColumn(c, kinds[c], description=(descriptions or {}).get(c)) for c in df.columns]
    )
    records = [dg.TableRecord({c: _cell(v, kinds[c]) for c, v in zip(df.columns, row, strict=True)})
               for row in df.itertuples(index=False)]  # fmt: skip
    return dg.MetadataValue.table(records=records, schema=schema)


#: The columns of an evaluation table shown in the UI and what the interval columns mean.
TABLE_COLUMNS = ["task", "method", "metric", "value", "ci_low", "ci_high", "n_samples"]
INTERVAL = {"ci_low": "95 % bootstrap interval, low", "ci_high": "95 % bootstrap interval, high"}


def evaluation_table_metadata(table: pd.DataFrame) -> dg.MetadataValue:
    """The evaluation rows as a Dagster table (shown as a table in the UI, with its column schema)."""
    return frame_table(table.reindex(columns=TABLE_COLUMNS), INTERVAL)


@contextmanager
def task_run(
    context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext, prag_settings: Any, duckdb: Any
) -> Iterator[tuple[Settings, Any, list[str]]]:
    """The run's settings, an open DuckDB connection (closed afterwards) and the tasks the run covers."""
    settings = prag_settings.get()
    tasks = run_tasks(context, settings)
    with duckdb.connect() as con:
        yield settings, con, tasks
