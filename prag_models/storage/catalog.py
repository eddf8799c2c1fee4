"""What a DuckDB table holds: its columns and types, and how many rows some tasks have (asset metadata reads it)."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from prag_models.storage.store import table_exists


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    """(column name, DuckDB type) of a table in declaration order; empty when the table does not exist."""
    return [
        (str(name), str(kind))
        for name, kind in con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = ? AND table_schema = 'main' ORDER BY ordinal_position",
            [table],
        ).fetchall()
    ]


def task_row_count(con: duckdb.DuckDBPyConnection, table: str, tasks: Sequence[str] | None = None) -> int:
    """Rows of a table that belong to the given tasks (all rows when tasks is None; 0 when the table is missing)."""
    if not table.isidentifier():
        raise ValueError(f"invalid table name {table!r}")
    if not table_exists(con, table):
        return 0
    columns = {name for name, _ in table_columns(con, table)}
    if tasks is None or "task" not in columns:
        return int(con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
    return int(con.execute(f'SELECT count(*) FROM "{table}" WHERE task IN ?', [list(tasks)]).fetchone()[0])
