"""DuckDB opens wait for another process's lock (bounded, naming the holder); readers fall back to the snapshot."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from prag_models.storage.store import DuckDBBusyError, connect, publish_snapshot, read_connection


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


def test_a_reader_in_a_loop_never_starves_a_writer(db: Path) -> None:
    """A reader opening the file in a tight loop never keeps a writer out for long (backoff retries, and read-only
    opens step aside while a writer waits)."""
    stop, reads = threading.Event(), []

    def hammer() -> None:
        while not stop.is_set():
            with connect(db, read_only=True, timeout_s=30) as con:
                reads.append(con.execute("SELECT count(*) FROM t").fetchone()[0])

    reader = threading.Thread(target=hammer)
    reader.start()
    try:
        time.sleep(0.5)
        code = ("import time; from prag_models.storage.store import connect; t = time.monotonic()\n"
                f"with connect({str(db)!r}, timeout_s=20) as c: c.execute('INSERT INTO t VALUES (5)')\n"
                "print(round(time.monotonic() - t, 2))")  # fmt: skip
        writer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    finally:
        stop.set()
        reader.join()
    assert writer.returncode == 0, writer.stderr[-2000:]
    assert float(writer.stdout.strip()) < 5 and len(reads) > 10 and reads[-1] in (1, 2)


def test_readers_go_to_the_snapshot_while_a_writer_waits(db: Path) -> None:
    publish_snapshot(db)
    code = ("import time; from prag_models.storage.store import connect\n"
            f"with connect({str(db)!r}) as c:\n    print('held', flush=True); time.sleep(10)")  # fmt: skip
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        started = time.monotonic()
        with read_connection(db, wait_s=5) as (con, source):
            assert source.startswith("snapshot") and con.execute("SELECT count(*) FROM t").fetchone() == (1,)
        assert time.monotonic() - started < 1  # straight to the snapshot, no wait on the live file
    finally:
        child.kill()
        child.wait()
