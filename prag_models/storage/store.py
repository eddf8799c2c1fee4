"""DuckDB storage helpers: partition-replacing writes, reads, and vector columns as fixed-size float arrays.

Writers go first: a process that opens the file for writing holds a shared ``flock`` on ``<file>.writer`` while it
waits for and holds the file, and read-only opens step aside while that lock is held (``read_connection`` reads the
published snapshot, ``connect(read_only=True)`` waits), so a reader opening the file in a loop never starves a run.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from prag_models.storage.faults import maybe_fail
from prag_models.storage.schema import _ident, column_types, migrate_columns

#: Rows per Arrow record batch when a stage streams a table: with the vector index, it bounds a stage's memory.
CHUNK_ROWS = int(os.environ.get("PRAG_CHUNK_ROWS", "16384"))


#: How long an open waits for another process's lock on the DuckDB file before it fails (seconds).
LOCK_TIMEOUT_S = float(os.environ.get("PRAG_DUCKDB_LOCK_TIMEOUT_S", "120"))
_HOLDER_PID = re.compile(r"PID (\d+)")
#: DuckDB memory_limit of every connection (e.g. "2GB"; empty = DuckDB's default, 80 % of RAM).
MEMORY_LIMIT = os.environ.get("PRAG_DUCKDB_MEMORY_LIMIT", "")
if MEMORY_LIMIT and not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", MEMORY_LIMIT):
    raise ValueError(f"PRAG_DUCKDB_MEMORY_LIMIT={MEMORY_LIMIT!r} is not a size such as 2GB")


class DuckDBBusyError(RuntimeError):
    """The DuckDB file stayed locked by another process for longer than the lock timeout."""


def lock_holder(message: str) -> str:
    """Who holds the DuckDB lock, from DuckDB's error text: pid, its command line and prag run id if known."""
    m = _HOLDER_PID.search(message)
    if not m:
        return "an unknown process"
    pid = m.group(1)
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        run = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"DAGSTER_RUN_ID=")), "")
    except OSError:
        return f"pid {pid} (no longer running, or not visible)"
    return f"pid {pid} ({cmd[:160]})" + (f", Dagster run {run}" if run else "")


def writer_lock_path(path: str | Path) -> Path:
    """The file whose shared flock says "a writer waits for or holds this DuckDB file" (``<file>.writer``)."""
    p = Path(path)
    return p.with_name(p.name + ".writer")


@contextmanager
def _writer_intent(path: Path) -> Iterator[None]:
    """Hold a shared flock on the writer file while a writer waits for and uses the DuckDB file."""
    try:
        handle = open(writer_lock_path(path), "a+")  # noqa: SIM115 - closed in finally
    except OSError:  # e.g. a read-only folder: no intent to announce, DuckDB's own lock still applies
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_SH)
        yield
    finally:
        handle.close()  # closing the file releases the flock


def writer_active(path: str | Path) -> bool:
    """Whether a process waits for or holds the DuckDB file for writing (its writer flock is held)."""
    lock = writer_lock_path(path)
    if not lock.exists():
        return False
    try:
        with open(lock, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


def _open(path: Path, read_only: bool, timeout_s: float) -> duckdb.DuckDBPyConnection:
    """Open the file, retrying with exponential backoff (0.05 s … 2 s) while another process holds its lock; a
    read-only open also waits while a writer waits for the file (writers go first)."""
    deadline, delay = time.monotonic() + timeout_s, 0.05
    while True:
        cause: Exception | None = None
        if read_only and writer_active(path):
            holder = "a writer (a process that waits for or holds it for writing)"
        else:
            try:
                return duckdb.connect(str(path), read_only=read_only)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise
                holder, cause = lock_holder(str(exc)), exc
        if time.monotonic() + delay > deadline:
            raise DuckDBBusyError(
                f"{path} is locked by {holder} for more than {timeout_s:.0f} s "
                f"({'read' if read_only else 'write'} access); retry when it is done "
                "(PRAG_DUCKDB_LOCK_TIMEOUT_S sets the wait)"
            ) from cause
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


@contextmanager
def connect(
    path: str | Path, read_only: bool = False, timeout_s: float | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the DuckDB file (creating its folder), waiting up to the lock timeout for another process, and close it.

    Fails with DuckDBBusyError naming the lock holder when the wait runs out.
    """
    p = Path(path)
    if not read_only:
        p.parent.mkdir(parents=True, exist_ok=True)
    elif not p.exists():
        raise FileNotFoundError(f"DuckDB file {p} does not exist yet: materialize the upstream assets first")
    with ExitStack() as stack:
        if not read_only:
            stack.enter_context(_writer_intent(p))
        con = _open(p, read_only, LOCK_TIMEOUT_S if timeout_s is None else timeout_s)
        if MEMORY_LIMIT:  # DuckDB's buffer pool otherwise grows to 80 % of RAM on large tasks (benchmarks/scale.py)
            con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
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


def replace_rows(con: duckdb.DuckDBPyConnection, table: str, df: Rows, where: dict[str, object] | None = None) -> int:
    """Atomically replace the rows matching `where` (all rows if None) by df; create the table from df if needed."""
    replace_many(con, [(table, df, where)])
    return len(df)


def require_table(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Raise a clear LookupError when a table does not exist (its asset was never materialized)."""
    _ident(table)
    if not table_exists(con, table):
        raise LookupError(f"table {table!r} does not exist: materialize the asset that writes it first")


def read_rows(
    con: duckdb.DuckDBPyConnection, table: str, where: dict[str, object] | None = None, order_by: str = ""
) -> pd.DataFrame:
    """Read the rows of a table matching `where` as a DataFrame (clear error if the table is missing)."""
    sql, params = _select(con, table, where, order_by, "*")
    return con.execute(sql, params).df()


def _select(
    con: duckdb.DuckDBPyConnection, table: str, where: dict[str, object] | None, order_by: str, columns: str
) -> tuple[str, list[object]]:
    """The SELECT of `columns` of a table's rows matching `where` (LookupError when the table is missing)."""
    require_table(con, table)
    sql = f"SELECT {columns} FROM {table}"
    params: list[object] = []
    if where:
        sql += " WHERE " + " AND ".join(f"{_ident(k)} = ?" for k in where)
        params = list(where.values())
    if order_by:
        sql += " ORDER BY " + ", ".join(_ident(c.strip()) for c in order_by.split(","))
    return sql, params


def read_arrow(
    con: duckdb.DuckDBPyConnection,
    table: str,
    where: dict[str, object] | None = None,
    order_by: str = "",
    columns: Sequence[str] = (),
) -> pa.Table:
    """Read the rows of a table matching `where` as an Arrow table (vector columns stay contiguous float arrays)."""
    cols = ", ".join(f'"{_ident(c)}"' for c in columns) or "*"
    sql, params = _select(con, table, where, order_by, cols)
    return con.sql(sql, params=params).to_arrow_table()


def iter_batches(
    con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object] = (), rows: int = CHUNK_ROWS
) -> Iterator[pa.RecordBatch]:
    """Stream a query's result as Arrow record batches of at most `rows` rows, on its own cursor so the caller may
    write through `con` between batches (the query reads the snapshot it started on)."""
    cursor = con.cursor()
    try:
        yield from cursor.sql(sql, params=list(params) or None).to_arrow_reader(rows)
    finally:
        cursor.close()


def matrix_to_column(matrix: np.ndarray) -> pa.FixedSizeListArray:
    """An (n, d) array as an Arrow fixed-size list column (DuckDB ``FLOAT[d]``), sharing the float32 buffer."""
    m = np.ascontiguousarray(matrix, dtype=np.float32)
    if m.ndim != 2:
        raise ValueError(f"expected an (n, d) matrix, got shape {m.shape}")
    return pa.FixedSizeListArray.from_arrays(pa.array(m.reshape(-1)), m.shape[1])


def column_to_matrix(values: object, dim: int | None = None) -> np.ndarray:
    """Stack a vector column into an (n, d) float32 array: Arrow list / fixed-size list columns (``FLOAT[]`` or
    ``FLOAT[d]``) without per-row Python objects, or a sequence of per-row arrays from a DataFrame."""
    if isinstance(values, pa.ChunkedArray | pa.Array):
        return _arrow_matrix(values, dim)
    if isinstance(values, np.ndarray) and values.ndim == 2:
        return values.astype(np.float32, copy=False)
    if len(values) == 0:  # type: ignore[arg-type]
        return np.zeros((0, dim or 0), dtype=np.float32)
    return np.stack([np.asarray(v, dtype=np.float32) for v in values])  # type: ignore[union-attr]


def _arrow_matrix(values: pa.ChunkedArray | pa.Array, dim: int | None) -> np.ndarray:
    """(n, d) float32 from an Arrow list or fixed-size list column (ValueError on nulls or ragged rows)."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    parts = []
    for chunk in chunks:
        if chunk.null_count:
            raise ValueError(f"{chunk.null_count} vectors are missing (NULL) in the column")
        if pa.types.is_fixed_size_list(chunk.type):
            width = chunk.type.list_size
        else:
            lengths = pc.list_value_length(chunk).to_numpy()
            width = int(lengths[0]) if len(lengths) else (dim or 0)
            if len(lengths) and (lengths != width).any():
                raise ValueError("vectors of different lengths in one column")
        flat = pc.list_flatten(chunk).to_numpy(zero_copy_only=False)
        parts.append(flat.astype(np.float32, copy=False).reshape(len(chunk), width))
    if not parts:
        return np.zeros((0, dim or 0), dtype=np.float32)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def snapshot_path(path: str | Path) -> Path:
    """Where the published read-only copy of a DuckDB file lives (``prag.snapshot.duckdb`` beside it)."""
    p = Path(path)
    return p.with_name(p.stem + ".snapshot" + p.suffix)


def publish_snapshot(path: str | Path, con: duckdb.DuckDBPyConnection | None = None) -> Path:
    """Copy the DuckDB file to its snapshot consistently (COPY FROM DATABASE into a temp file, then an atomic rename),
    so that readers have a complete version to read while a later run holds the live file. ``con``: a read-write
    connection the caller holds on the file (nobody else can write in between); else one is opened."""
    p, target = Path(path), snapshot_path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with ExitStack() as stack:
        if con is None:
            con = stack.enter_context(connect(p))
        con.execute(f"ATTACH '{tmp}' AS prag_snapshot")
        try:
            (name,) = con.execute("SELECT current_database()").fetchone()
            con.execute(f'COPY FROM DATABASE "{name}" TO prag_snapshot')
        finally:
            con.execute("DETACH prag_snapshot")
    os.replace(tmp, target)
    return target


@contextmanager
def read_connection(path: str | Path, wait_s: float = 2.0) -> Iterator[tuple[duckdb.DuckDBPyConnection, str]]:
    """A read-only connection for readers (reports, serving): the live file when it is free within ``wait_s``, else
    the last published snapshot; yields (connection, "live" | "snapshot <path>"). Readers never wait on a run: while
    a writer waits for or holds the file they go straight to the snapshot when there is one."""
    snap = snapshot_path(path)
    if not (snap.exists() and writer_active(path)):
        try:
            with connect(path, read_only=True, timeout_s=wait_s) as con:
                yield con, "live"
                return
        except DuckDBBusyError:
            if not snap.exists():
                raise
    with connect(snap, read_only=True, timeout_s=wait_s) as con:
        yield con, f"snapshot {snap}"


@dataclass(frozen=True)
class QueryRows:
    """A table's new rows as a query: replace_many writes them with INSERT … SELECT inside DuckDB, so they never pass
    through Python (the query must not read the table it replaces)."""

    sql: str
    params: tuple[object, ...] = ()
    rows: int = 0  # how many rows the query yields (for logs and metadata)

    def __len__(self) -> int:
        """The number of rows the query yields."""
        return self.rows


#: What a partition-replacing write takes: a DataFrame, an Arrow table (vector columns as FLOAT[d]) or a query.
Rows = pd.DataFrame | pa.Table | QueryRows


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """The block's statements in ONE transaction: committed when it ends, rolled back (and re-raised) when it fails."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


def replace_many(con: duckdb.DuckDBPyConnection, writes: Sequence[tuple[str, Rows, dict[str, object] | None]]) -> None:
    """Several partition-replacing writes (table, rows, where) in ONE transaction: all of them land, or none."""
    names = []
    try:
        con.execute("BEGIN TRANSACTION")
        for i, (table, rows, where) in enumerate(writes):
            _ident(table)
            if isinstance(rows, QueryRows):
                source, params = f"({rows.sql})", list(rows.params)
            else:
                source, params = f"_prag_incoming_{i}", []
                con.register(source, rows)
                names.append(source)
            incoming = column_types(con, source, params)
            if not table_exists(con, table):
                con.execute(f"CREATE TABLE {table} AS SELECT * FROM {source} LIMIT 0", params or None)
            else:
                migrate_columns(con, table, incoming)
            if where:
                clause = " AND ".join(f"{_ident(k)} = ?" for k in where)
                con.execute(f"DELETE FROM {table} WHERE {clause}", list(where.values()))
            else:
                con.execute(f"DELETE FROM {table}")
            cols = ", ".join(f'"{_ident(c)}"' for c in incoming)
            con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {source}", params or None)
        maybe_fail("table_write", [table for table, _, _ in writes])  # reliability tests: die before the commit
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    finally:
        for name in names:
            con.unregister(name)
