"""The fault switch itself, a table write killed inside its transaction, and the instance prag's commands use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from prag_models.storage.faults import EXIT_CODE, InjectedFault, armed, maybe_fail
from prag_models.storage.store import replace_many
from reliability.helpers import table_checksums


def test_unset_is_a_no_op_and_specs_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRAG_FAULT", raising=False)
    maybe_fail("table_write", ["t"])
    assert armed({"PRAG_FAULT": "table_write@t:raise, training_epoch:exit"}) == [
        ("table_write", "t", "raise"),
        ("training_epoch", None, "exit"),
    ]
    with pytest.raises(ValueError, match="'embedding:raise' is not <point>"):
        armed({"PRAG_FAULT": "embedding:raise"})
    with pytest.raises(ValueError, match="unknown fault point"):
        maybe_fail("nowhere")


def test_a_target_narrows_the_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRAG_FAULT", "table_write@b:raise")
    maybe_fail("table_write", ["a"])  # another table: nothing happens
    with pytest.raises(InjectedFault, match=r"table_write \['a', 'b'\] \(raise\)"):
        maybe_fail("table_write", ["a", "b"])


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "prag.duckdb"
    with duckdb.connect(str(db)) as con:
        replace_many(con, [("a", pd.DataFrame({"task": ["T"] * 3, "x": [1, 2, 3]}), None),
                           ("b", pd.DataFrame({"task": ["T"], "y": ["old"]}), None)])  # fmt: skip
    return db


def test_raise_inside_the_transaction_rolls_every_table_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _db(tmp_path)
    before = table_checksums(db)
    monkeypatch.setenv("PRAG_FAULT", "table_write:raise")
    with duckdb.connect(str(db)) as con, pytest.raises(InjectedFault):
        replace_many(con, [("a", pd.DataFrame({"task": ["T"], "x": [9]}), {"task": "T"}),
                           ("b", pd.DataFrame({"task": ["T"], "y": ["new"]}), {"task": "T"})])  # fmt: skip
    assert table_checksums(db) == before


def test_exit_inside_the_transaction_leaves_the_previous_version(tmp_path: Path) -> None:
    """os._exit (what kill -9 does) after the deletes and inserts of two tables, before the commit."""
    db = _db(tmp_path)
    before = table_checksums(db)
    code = (
        "import duckdb, pandas as pd\nfrom prag_models.storage.store import replace_many\n"
        f"con = duckdb.connect({str(db)!r})\n"
        "replace_many(con, [('a', pd.DataFrame({'task': ['T'], 'x': [9]}), {'task': 'T'}),"
        " ('b', pd.DataFrame({'task': ['T'], 'y': ['new']}), {'task': 'T'})])\n"
    )
    env = {"PRAG_FAULT": "table_write@b:exit", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_CODE and "injected fault at table_write ['a', 'b'] (exit)" in done.stderr
    assert table_checksums(db) == before


def test_an_inherited_dagster_home_is_reported_and_not_used(tmp_path: Path, monkeypatch, capsys) -> None:
    from prag_assets.cli.commands import dagster_env
    from prag_models.config.settings import PROJECT_ROOT, load_settings

    settings = load_settings(home=str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere"))
    env = dagster_env(settings)
    assert env["DAGSTER_HOME"] == str(PROJECT_ROOT)
    assert env["PRAG_DAGSTER_STORAGE"] == str(settings.home_path / "dagster")
    warning = capsys.readouterr().err
    assert f"ignoring the inherited DAGSTER_HOME={tmp_path / 'elsewhere'}" in warning
    assert f"DAGSTER_HOME={PROJECT_ROOT}" in warning
    monkeypatch.setenv("DAGSTER_HOME", str(PROJECT_ROOT))  # the same instance (scripts/env.sh): nothing to say
    monkeypatch.setenv("PRAG_DAGSTER_STORAGE", str(settings.home_path / "dagster"))
    monkeypatch.delenv("PRAG_DAGSTER_LOGS", raising=False)
    dagster_env(settings)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://host/v1", "127.0.0.1:8000/v1", "javascript:alert(1)"])
def test_generator_base_url_must_be_http(url: str) -> None:
    from prag_models.config.settings import ConfigError, load_settings

    with pytest.raises(ConfigError, match="generator.base_url must be an http"):
        load_settings(environ={"PRAG__GENERATOR__BASE_URL": url})
