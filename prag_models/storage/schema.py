"""Table schemas that follow the incoming rows: identifiers checked before they reach SQL, the column types of a
table or query, and the migration of a stored table to the columns a newer prag writes."""

from __future__ import annotations

import re
from collections.abc import Sequence

import duckdb

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: DuckDB's type of a column created from an empty frame's object column: it holds only NULLs.
UNTYPED = '"NULL"'


def _ident(name: str) -> str:
    """Validate a table/column identifier (they are interpolated into SQL)."""
    if not _IDENT.match(name):
        raise ValueError(f"invalid SQL identifier {name!r}")
    return name


def column_types(con: duckdb.DuckDBPyConnection, source: str, params: Sequence[object] = ()) -> dict[str, str]:
    """Column name → DuckDB type of a table, registered view or parenthesised query."""
    rel = con.sql(f"SELECT * FROM {source} LIMIT 0", params=list(params) or None)
    return {name: str(kind) for name, kind in zip(rel.columns, rel.types, strict=True)}


def migrate_columns(con: duckdb.DuckDBPyConnection, table: str, incoming: dict[str, str]) -> None:
    """Bring a stored table to the incoming columns: add the columns it lacks (NULL in old rows), type the columns an
    empty first write left untyped, and turn a variable-length vector column (``FLOAT[]``) into the incoming
    ``FLOAT[d]`` when every stored row has d values (otherwise leave it: the insert casts, readers accept both)."""
    stored = column_types(con, table)
    for name, kind in incoming.items():
        col = f'"{_ident(name)}"'
        if name not in stored:
            con.execute(f"ALTER TABLE {table} ADD COLUMN {col} {kind}")
            continue
        if stored[name] == UNTYPED != kind:  # a task with nothing to write created the table
            con.execute(f"ALTER TABLE {table} ALTER COLUMN {col} SET DATA TYPE {kind}")
            continue
        fixed = re.fullmatch(r"(\w+)\[(\d+)\]", kind)
        if not fixed or stored[name] != f"{fixed.group(1)}[]":
            continue
        (ragged,) = con.execute(f"SELECT count(*) FROM {table} WHERE len({col}) <> {int(fixed.group(2))}").fetchall()[0]
        if not ragged:
            con.execute(f"ALTER TABLE {table} ALTER COLUMN {col} SET DATA TYPE {kind}")
