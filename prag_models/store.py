"""DuckDB storage helpers: partition-replacing writes, reads, and vector columns as fixed-size float arrays."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _ident(name: str) -> str:
    """Validate a table/column identifier (they are interpolated into SQL)."""
    if not _IDENT.match(name):
        raise ValueError(f"invalid SQL identifier {name!r}")
    return name


@contextmanager
def connect(path: str | Path, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the DuckDB file (creating its folder) and close it afterwards."""
    p = Path(path)
    if not read_only:
        p.parent.mkdir(parents=True, exist_ok=True)
    elif not p.exists():
        raise FileNotFoundError(f"DuckDB file {p} does not exist yet: materialize the upstream assets first")
    con = duckdb.connect(str(p), read_only=read_only)
    try:
        yield con
    finally:
        con.close()


def table_exists(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether a table exists in the main schema."""
    row = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = 'main'", [table]
    ).fetchall()
    return bool(row and row[0][0])


def replace_rows(
    con: duckdb.DuckDBPyConnection, table: str, df: pd.DataFrame, where: dict[str, object] | None = None
) -> int:
    """Atomically replace the rows matching `where` (all rows if None) by df; create the table from df if needed."""
    _ident(table)
    con.register("_prag_incoming", df)
    try:
        con.execute("BEGIN TRANSACTION")
        if not table_exists(con, table):
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM _prag_incoming LIMIT 0")
        if where:
            clause = " AND ".join(f"{_ident(k)} = ?" for k in where)
            con.execute(f"DELETE FROM {table} WHERE {clause}", list(where.values()))
        else:
            con.execute(f"DELETE FROM {table}")
        cols = ", ".join(f'"{_ident(c)}"' for c in df.columns)
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _prag_incoming")
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    finally:
        con.unregister("_prag_incoming")
    return len(df)


def read_rows(
    con: duckdb.DuckDBPyConnection, table: str, where: dict[str, object] | None = None, order_by: str = ""
) -> pd.DataFrame:
    """Read the rows of a table matching `where` as a DataFrame (clear error if the table is missing)."""
    _ident(table)
    if not table_exists(con, table):
        raise LookupError(f"table {table!r} does not exist: materialize the asset that writes it first")
    sql = f"SELECT * FROM {table}"
    params: list[object] = []
    if where:
        sql += " WHERE " + " AND ".join(f"{_ident(k)} = ?" for k in where)
        params = list(where.values())
    if order_by:
        sql += " ORDER BY " + ", ".join(_ident(c.strip()) for c in order_by.split(","))
    return con.execute(sql, params).df()


def matrix_to_column(matrix: np.ndarray) -> list[np.ndarray]:
    """Turn an (n, d) array into a list of float32 rows for a DataFrame vector column."""
    return list(np.asarray(matrix, dtype=np.float32))


def column_to_matrix(values: Sequence[object], dim: int | None = None) -> np.ndarray:
    """Stack a vector column read from DuckDB into an (n, d) float32 array."""
    if len(values) == 0:
        return np.zeros((0, dim or 0), dtype=np.float32)
    return np.stack([np.asarray(v, dtype=np.float32) for v in values])
