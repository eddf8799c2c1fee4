"""What a failure writes in Dagster's records goes with the user (docs/privacy.md, issue 51): a run stopped by a
malformed record of the user quotes its value and names its ids, a failed blocking check names the user; after
`prag forget` no file under the home holds the quoted value, and no Dagster file names the user, while the run that
named nobody stays."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import materialize_graph, write_config

from prag_assets.cli.commands import dagster_env
from prag_assets.cli.forget_records import _home_env
from prag_models.config.settings import load_settings
from prag_models.data.source import demo_root
from privacy.helpers import edit_questions

pytestmark = pytest.mark.models

TASK = "LaMP-2"
ERASED = "u0001"
#: The malformed value of the user's record: the stopped run's error quotes it.
BAD_DATE = "zqbaddatefailq"
#: Named by nobody but the user's own check failure beside the user id.
USER_ID = re.compile(rb"(?<![\\\w])" + re.escape(ERASED.encode()) + rb"(?!\w)")  # not inside "\u0001", "u00012"


def _loaded(config: Path, instance, raise_on_error: bool = True):  # noqa: ANN001, ANN202 - Dagster objects
    """Materialize the LaMP samples and documents (with their blocking checks) on the home's instance."""
    import dagster as dg

    selection = dg.AssetSelection.assets("lamp_samples", "profile_documents")
    return materialize_graph(config, [TASK], selection=selection, raise_on_error=raise_on_error, instance=instance)


def _break_date(root: Path) -> str:
    """Give one of the erased user's profile documents the bad date; returns the sample id whose profile holds it."""
    found: list[str] = []

    def edit(q: dict, _side: dict) -> None:
        if q["user_id"] == ERASED and not found:
            q["profile"][0]["date"] = BAD_DATE
            found.append(str(q["id"]))

    edit_questions(root, edit)
    return found[0]


def _files(folder: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file under a folder."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_forget_erases_what_failures_wrote_in_dagsters_records(tmp_path, monkeypatch) -> None:
    import dagster as dg

    from prag_assets.checks import lamp_checks

    home = tmp_path / "home"
    config = write_config(tmp_path / "prag.toml", home, generator_backend="fake", data={"tasks": [TASK]})
    settings = load_settings(config)
    source = demo_root(settings)  # the source files hold the bad value, by design: not searched
    for name in ("DAGSTER_HOME", "PRAG_DAGSTER_STORAGE", "PRAG_DAGSTER_LOGS"):  # the instance `prag materialize` uses
        monkeypatch.setenv(name, dagster_env(settings, warn=False)[name])
        assert _home_env(settings)[name] == os.environ[name]  # and the one forget searches
    real = lamp_checks.validate_frame

    def failing(name: str, df, expectations):  # noqa: ANN001, ANN202 - as validate_frame
        """The samples' check fails naming the user, as a GX expectation names unexpected values."""
        ok, problems = real(name, df, expectations)
        if not name.startswith("lamp_samples"):
            return ok, problems
        return False, [*problems, f"expect_column_values_to_be_unique failed: {{'partial_unexpected_list': "
                                  f"['{ERASED}']}}"]  # fmt: skip

    with dg.DagsterInstance.get() as instance:
        clean = _loaded(config, instance)  # names nobody: stays
        assert clean.success
        monkeypatch.setattr(lamp_checks, "validate_frame", failing)
        checked = _loaded(config, instance, raise_on_error=False)
        monkeypatch.setattr(lamp_checks, "validate_frame", real)
        sample = _break_date(source)
        stopped = _loaded(config, instance, raise_on_error=False)
        assert not checked.success and not stopped.success
        runs = {r.dagster_run.run_id for r in instance.get_run_records()}
    assert runs == {clean.run_id, checked.run_id, stopped.run_id}
    dagster = _files(home / "dagster")
    assert any(n.endswith(".db") for n in dagster) and any(n.endswith((".err", ".out")) for n in dagster), dagster
    # teeth: the failures did write the user's value and ids in Dagster's records, database and compute logs
    quoting = sorted(n for n, data in dagster.items() if BAD_DATE.encode() in data)
    assert any(n.endswith(".db") for n in quoting) and any(n.endswith((".err", ".out")) for n in quoting), quoting
    assert any(f"'{sample}'".encode() in data for data in dagster.values())  # the stopped record's id
    assert any(USER_ID.search(data) for n, data in dagster.items() if n.endswith(".db"))  # the check's failure

    from prag_assets.cli.forget import run_forget

    monkeypatch.setenv("PRAG_CONFIG", str(config))
    assert run_forget(ERASED) == 0
    after = {n: data for n, data in _files(home).items() if not (home / n).is_relative_to(source)}
    assert "prag.duckdb" in after and any(n.startswith("dagster/") for n in after)
    leaks = sorted(n for n, data in after.items() if BAD_DATE.encode() in data)
    assert leaks == [], f"files holding the malformed value of the erased user: {leaks}"
    named = sorted(n for n, data in _files(home / "dagster").items() if USER_ID.search(data))
    assert named == [], f"Dagster's files naming the erased user: {named}"
    with dg.DagsterInstance.get() as instance:  # only the runs that named the user went
        assert [r.dagster_run.run_id for r in instance.get_run_records()] == [clean.run_id]
    from prag_models.storage.store import connect

    with connect(settings.duckdb_path, read_only=True) as con:  # the audit counts what went
        (records,) = con.execute("SELECT records_json FROM erasure_audit WHERE user_id = ?", [ERASED]).fetchone()
    assert '"dagster_runs": 2' in records
    assert run_forget(ERASED) == 0  # again: nothing more to find


def test_forget_names_the_ids_only_the_source_knows(tmp_path) -> None:
    """A run that stops on the user's malformed record loads none of its rows into DuckDB, so the record id its
    error names is known only to the LaMP files: forget reads them leniently (the malformed record set aside) and
    searches Dagster's records for the user's sample, document and record ids too; unreadable files name nothing."""
    from prag_assets.cli.forget_records import source_ids

    config = write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake", data={"tasks": [TASK]})
    settings = load_settings(config)
    broken = _break_date(demo_root(settings))  # "stop" would refuse these files: forget still reads them
    ids = source_ids(settings, ERASED, TASK)
    assert broken in ids and len(ids) > 2, ids
    assert not ids & source_ids(settings, "u0002", TASK)  # another user's ids are not the erased user's
    (tmp_path / "empty").mkdir()
    gone = settings.model_copy(update={"data": settings.data.model_copy(update={"source": "lamp",
                                                                              "lamp_dir": str(tmp_path / "empty")})})
    assert source_ids(gone, ERASED) == set()  # no LaMP files there: nothing to name, no error
