"""The prag DuckDB resource is dagster-duckdb's DuckDBResource over ``store.connect``: same file, same locking."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dagster as dg
import dagster_duckdb
import pytest

from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.storage import store
from prag_models.storage.store import DuckDBBusyError, publish_snapshot


def _resource(tmp_path: Path, **kwargs) -> DuckDBResource:
    """The resource over a fresh prag home."""
    return DuckDBResource(settings=PragSettingsResource(home=str(tmp_path / "home")), **kwargs)


def test_it_is_the_dagster_duckdb_resource_on_the_prag_home(tmp_path: Path) -> None:
    duckdb = _resource(tmp_path)
    assert isinstance(duckdb, dagster_duckdb.DuckDBResource)
    assert duckdb.path() == tmp_path / "home" / "prag.duckdb"
    with duckdb.get_connection() as con:  # creates the folder and the file, like store.connect
        con.execute("CREATE TABLE t AS SELECT 1 AS a")
    with duckdb.connect(read_only=True) as con:
        assert con.execute("SELECT a FROM t").fetchall() == [(1,)]
    assert _resource(tmp_path, database=str(tmp_path / "other.duckdb")).path() == tmp_path / "other.duckdb"


def test_connection_config_is_applied_and_checked(tmp_path: Path) -> None:
    with _resource(tmp_path, connection_config={"threads": 1}).get_connection() as con:
        assert con.execute("SELECT current_setting('threads')").fetchone() == (1,)
    with pytest.raises(ValueError, match="not a DuckDB setting"), _resource(
        tmp_path, connection_config={"threads = 1; DROP TABLE t; --": 1}
    ).get_connection():
        pass


def test_a_busy_file_names_its_holder_and_readers_take_the_snapshot(tmp_path: Path, monkeypatch) -> None:
    duckdb = _resource(tmp_path)
    with duckdb.get_connection() as con:
        con.execute("CREATE TABLE t AS SELECT 1 AS a")
    publish_snapshot(duckdb.path())
    code = f"import duckdb, time; c = duckdb.connect({str(duckdb.path())!r}); print('held', flush=True); time.sleep(10)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        monkeypatch.setattr(store, "LOCK_TIMEOUT_S", 0.5)
        with pytest.raises(DuckDBBusyError, match=rf"locked by pid {child.pid}"), duckdb.get_connection():
            pass
        with duckdb.read_connection(wait_s=0.3) as (con, source):
            assert source.startswith("snapshot") and con.execute("SELECT a FROM t").fetchall() == [(1,)]
    finally:
        child.kill()
        child.wait()


def test_assets_get_it_as_a_configured_resource(tmp_path: Path) -> None:
    @dg.asset
    def one_row(duckdb: DuckDBResource) -> dg.MaterializeResult:
        with duckdb.get_connection() as con:
            con.execute("CREATE TABLE one_row AS SELECT 42 AS answer")
        return dg.MaterializeResult(metadata={"path": str(duckdb.path())})

    settings = PragSettingsResource(home=str(tmp_path / "home"))
    result = dg.materialize([one_row], resources={"duckdb": DuckDBResource(settings=settings)})
    assert result.success
    with _resource(tmp_path).connect(read_only=True) as con:
        assert con.execute("SELECT answer FROM one_row").fetchall() == [(42,)]
