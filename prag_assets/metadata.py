"""The metadata the assets report: each task partition's own entries (row count, column schema, statistics),
tables as Dagster shows them, and progress logging.

No row of a user's data is previewed: Dagster's event log keeps every materialization's metadata and `prag forget`
does not edit it, so metadata and log lines carry counts, figures and names, never a user's text (docs/privacy.md)."""

from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
import pandas as pd

from prag_models.storage.catalog import COLUMN_DESCRIPTIONS


def progress_logger(context: dg.AssetExecutionContext, what: str, every: float = 0.1) -> Callable[[int, int], None]:
    """A progress callback logging 'what: done/total' about every 10 %, with the time left at the rate so far."""
    import time

    state = {"last": -1.0, "started": time.perf_counter()}

    def log(done: int, total: int) -> None:
        frac = done / total if total else 1.0
        if frac - state["last"] >= every or done == total:
            state["last"] = frac
            spent = time.perf_counter() - state["started"]
            left = f", about {spent * (total - done) / done:.0f} s left" if 0 < done < total else ""
            context.log.info(f"{what}: {done}/{total} ({frac:.0%}){left}")

    return log


def table_metadata(con, table: str, tasks: list[str] | None) -> dict[str, dg.MetadataValue]:
    """`dagster/row_count` (rows of the given tasks), `dagster/column_schema` (with the table's column descriptions)
    and the name of a DuckDB table the asset wrote."""
    from prag_models.storage.catalog import table_columns, task_row_count

    described = COLUMN_DESCRIPTIONS.get(table, {})
    schema = dg.TableSchema(
        columns=[dg.TableColumn(name, kind.lower(), description=described.get(name))
                 for name, kind in table_columns(con, table)]
    )  # fmt: skip
    return {
        "dagster/row_count": dg.MetadataValue.int(task_row_count(con, table, tasks)),
        "dagster/column_schema": dg.MetadataValue.table_schema(schema),
        "duckdb_table": dg.MetadataValue.text(table),
    }


def _scalar(value: Any) -> dg.MetadataValue:
    """One statistic as a metadata value Dagster shows as such (numbers are plotted across partitions)."""
    if value is None:
        return dg.MetadataValue.null()
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(round(value, 4)) if value == value else dg.MetadataValue.null()
    return dg.MetadataValue.text(str(value))


def stats_metadata(stats: Mapping[str, Any], prefix: str = "") -> dict[str, dg.MetadataValue]:
    """One task's statistics as metadata entries: numbers and text as such, a dict as `key/sub` entries, a list of
    scalars as text, a list of records as a table; JSON only for what is nested deeper."""
    out: dict[str, dg.MetadataValue] = {}
    for key, value in stats.items():
        name = f"{prefix}{key}"
        if isinstance(value, dg.MetadataValue):  # before the tuple test: some metadata values are tuples
            out[name] = value
        elif isinstance(value, Mapping):
            out.update(stats_metadata(value, f"{name}/"))
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Mapping) for v in value):
            out[name] = frame_table(pd.DataFrame(list(value)))
        elif isinstance(value, (list, tuple)):
            flat = all(not isinstance(v, (Mapping, list, tuple)) for v in value)
            out[name] = dg.MetadataValue.text(", ".join(map(str, value))) if flat else dg.MetadataValue.json(value)
        else:
            out[name] = _scalar(value)
    return out


def _flat(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict as one level of `key/sub` columns; lists as comma-separated text."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else v
    return out


def keyed_table(rows: Mapping[str, Mapping[str, Any]], key: str) -> dg.MetadataValue:
    """Statistics keyed by name (a dataset, a stage, the run) as one table with a `key` column: one row per name."""
    return frame_table(pd.DataFrame([{key: name, **_flat(row)} for name, row in rows.items()]))


def report_partitions(
    context: dg.AssetExecutionContext,
    con: Any,
    table: str | None,
    per_task: Mapping[str, Mapping[str, Any]],
    extra: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Each task partition's own metadata: the row count and schema of its rows of `table`, its statistics and its
    extra entries (Dagster would otherwise give every partition of a range run the same, whole-run metadata)."""
    for task, stats in per_task.items():
        written = table_metadata(con, table, [task]) if table else {}
        context.add_asset_metadata(
            {**written, **stats_metadata(stats), **(extra or {}).get(task, {})}, partition_key=task
        )


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
