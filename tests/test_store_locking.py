"""DuckDB opens wait for another process's lock (bounded, naming the holder); readers fall back to the snapshot."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from prag_models.store import DuckDBBusyError, connect, publish_snapshot, read_connection


def _hold(db: Path, seconds: float) -> subprocess.Popen:
    """A child process that opens the file for writing and keeps it for a while."""
    code = f"import duckdb, time; c = duckdb.connect({str(db)!r}); print('held', flush=True); time.sleep({seconds})"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "prag.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE t AS SELECT 1 AS a")
    return path


def test_a_writer_waits_for_the_lock_and_then_gets_the_file(db: Path) -> None:
    child = _hold(db, 1.5)
    started = time.monotonic()
    with connect(db, timeout_s=30) as con:
        assert con.execute("SELECT a FROM t").fetchall() == [(1,)]
    assert time.monotonic() - started >= 0.5  # it waited, it did not fail
    child.wait()


def test_the_wait_is_bounded_and_names_the_holder(db: Path) -> None:
    child = _hold(db, 10)
    try:
        with (
            pytest.raises(DuckDBBusyError, match=rf"locked by pid {child.pid} .*for more than 1 s"),
            connect(db, timeout_s=1),
        ):
            pass
    finally:
        child.kill()
        child.wait()


def test_readers_read_the_published_snapshot_while_a_run_holds_the_file(db: Path) -> None:
    publish_snapshot(db)
    with duckdb.connect(str(db)) as con:
        con.execute("INSERT INTO t VALUES (2)")  # a later run's change, not yet published
    child = _hold(db, 10)
    try:
        with read_connection(db, wait_s=0.3) as (con, source):
            assert source.startswith("snapshot") and con.execute("SELECT count(*) FROM t").fetchone() == (1,)
    finally:
        child.kill()
        child.wait()
    with read_connection(db) as (con, source):
        assert source == "live" and con.execute("SELECT count(*) FROM t").fetchone() == (2,)
