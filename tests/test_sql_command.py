"""`prag sql`: a read-only query on the home's DuckDB file, printed as a table, CSV or JSON; no file outside it."""

import json

import duckdb
import pytest
from conftest import hold_writer

from prag_assets.cli import commands as cli


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A prag home whose DuckDB file holds a small lamp_evaluation table."""
    home = tmp_path / "home"
    home.mkdir()
    with duckdb.connect(str(home / "prag.duckdb")) as con:
        con.execute("CREATE TABLE lamp_evaluation (task VARCHAR, method VARCHAR, value DOUBLE)")
        con.execute("INSERT INTO lamp_evaluation VALUES ('LaMP-2', 'dense', 0.5), ('LaMP-2', 'random', 0.25)")
    monkeypatch.setenv("PRAG_HOME", str(home))
    return home


def test_query_prints_a_table(home, capsys) -> None:
    """The result reads as a markdown table with the selected rows."""
    assert cli.main(["sql", "select method, value from lamp_evaluation order by value desc"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "method" in lines[0] and "value" in lines[0]
    assert "dense" in lines[2] and "random" in lines[3] and len(lines) == 4


def test_csv_and_json_formats(home, capsys) -> None:
    """--format csv and json give machine-readable output."""
    assert cli.main(["sql", "select method from lamp_evaluation order by method", "--format", "csv"]) == 0
    assert capsys.readouterr().out == "method\ndense\nrandom\n"
    assert cli.main(["sql", "select count(*) as n from lamp_evaluation", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"n": 2}]


def test_writes_are_refused_and_change_nothing(home, capsys) -> None:
    """The file is opened read-only: a DELETE fails with DuckDB's message and the rows stay."""
    assert cli.main(["sql", "delete from lamp_evaluation"]) == 1
    assert "read-only" in capsys.readouterr().err.lower()
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from lamp_evaluation").fetchone()[0] == 2


def test_missing_file_and_bad_sql_fail_clearly(tmp_path, home, capsys, monkeypatch) -> None:
    """A wrong query names DuckDB's error; a home without a file says to materialize first."""
    assert cli.main(["sql", "select * from no_such_table"]) == 1
    assert "no_such_table" in capsys.readouterr().err
    monkeypatch.setenv("PRAG_HOME", str(tmp_path / "empty"))
    assert cli.main(["sql", "select 1"]) == 1
    assert "prag materialize" in capsys.readouterr().err


@pytest.mark.parametrize("held", [False, True], ids=["live file", "snapshot while a run holds the file"])
def test_no_file_is_written_or_read_outside_the_database(home, tmp_path, capsys, held) -> None:
    """COPY ... TO writes no file and read_csv / read_text read none (issue 39): external access is off on the live
    file and on the snapshot a reader gets while a run holds it; it cannot be turned back on; queries still work."""
    from prag_models.storage.store import publish_snapshot

    outside = tmp_path / "outside.csv"
    outside.write_text("secret\nzqoutside\n", encoding="utf-8")
    written = tmp_path / "written.csv"
    holder = None
    if held:
        publish_snapshot(home / "prag.duckdb")
        holder = hold_writer(home / "prag.duckdb")
    try:
        assert cli.main(["sql", f"COPY (SELECT 1 AS x) TO '{written}'"]) == 1
        assert "disabled by configuration" in capsys.readouterr().err and not written.exists()
        for reader in (f"read_csv_auto('{outside}')", f"read_text('{outside}')"):
            assert cli.main(["sql", f"SELECT * FROM {reader}"]) == 1
            err = capsys.readouterr().err
            assert "would read a file" in err and "zqoutside" not in err
        assert cli.main(["sql", f"SET enable_external_access = true; COPY (SELECT 1 AS x) TO '{written}'"]) == 1
        assert "locked" in capsys.readouterr().err and not written.exists()
        assert cli.main(["sql", "select count(*) as n from lamp_evaluation", "--format", "json"]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out) == [{"n": 2}]
        assert ("snapshot" in captured.err) == held
    finally:
        if holder is not None:
            holder.kill()
            holder.wait(timeout=30)


@pytest.mark.parametrize("held", [False, True], ids=["live file", "snapshot while a run holds the file"])
def test_the_database_file_itself_cannot_be_read(home, capsys, held) -> None:
    """External access off still lets DuckDB read the open database's own file, freed blocks (erased rows) included
    (issue 51): every table function that reads files is refused before the query runs, however it is called, and
    the catalog views and generators still work."""
    from prag_models.storage.store import publish_snapshot, snapshot_path

    with duckdb.connect(str(home / "prag.duckdb")) as con:  # a deleted row whose bytes stay in the file
        con.execute("CREATE TABLE erased AS SELECT 'zqerased' || range AS text FROM range(500)")
        con.execute("CHECKPOINT")
        con.execute("DELETE FROM erased")
        con.execute("CHECKPOINT")
    assert b"zqerased" in (home / "prag.duckdb").read_bytes()
    holder = None
    if held:
        publish_snapshot(home / "prag.duckdb")
        holder = hold_writer(home / "prag.duckdb")
    db = snapshot_path(home / "prag.duckdb") if held else home / "prag.duckdb"
    try:
        for query in (f"SELECT content FROM read_blob('{db}')", f"SELECT * FROM read_text('{db}')",
                      f"SELECT * FROM read_csv('{db}', all_varchar = true, header = false)",
                      f"SELECT * FROM read_parquet('{db}')", f"SELECT * FROM read_json('{db}')",
                      f"SELECT * FROM glob('{db.parent}/*')", f"SELECT * FROM \"READ_BLOB\"('{db}')",
                      f"SELECT (SELECT content FROM read_blob('{db}'))", f"CALL read_blob('{db}')",
                      f"EXPLAIN ANALYZE SELECT * FROM read_blob('{db}')", "SELECT * FROM query('FROM glob(''*'')')",
                      f"FROM '{db}'"):  # fmt: skip
            assert cli.main(["sql", query, "--format", "csv"]) == 1, query
            captured = capsys.readouterr()
            assert "would read a file" in captured.err and "never a file" in captured.err, query
            assert "zqerased" not in captured.out + captured.err and "DUCK" not in captured.out, query
        for query in ("SELECT count(*) AS n FROM range(3)", "SELECT count(*) AS n FROM duckdb_tables()",
                      "SELECT count(*) AS n FROM pragma_table_info('lamp_evaluation')"):  # fmt: skip
            assert cli.main(["sql", query, "--format", "json"]) == 0, query
            assert json.loads(capsys.readouterr().out)[0]["n"] >= 2
    finally:
        if holder is not None:
            holder.kill()
            holder.wait(timeout=30)
