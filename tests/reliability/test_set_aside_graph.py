"""Malformed LaMP records through the real `lamp_samples` asset: by default the run fails before anything is written,
naming the setting; with ``data.malformed = "set_aside"`` it completes, table set_aside_records holds the records,
the asset's metadata, `prag report` and the closing summary of `prag materialize` count them per task, and
`prag forget` deletes a forgotten user's rows (and a later run does not bring them back)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from conftest import materialize_graph, partition_metadata, write_config

from reliability.helpers import table_checksums, write_lamp_folder

TASKS = ["LaMP-2", "LaMP-3"]
SELECTION = ["lamp_samples", "profile_documents"]
SETTING = ('data.malformed = "set_aside"', "PRAG__DATA__MALFORMED=set_aside")
LINE = "LaMP-2: 2 malformed records set aside (1 document, 1 question): table set_aside_records"


@pytest.fixture(scope="module")
def flawed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A LaMP folder whose LaMP-2 dev file has one profile tag in the wrong case and one malformed question."""
    tmp = tmp_path_factory.mktemp("set_aside")
    lamp = write_lamp_folder(tmp / "lamp", tuple(TASKS))
    path = lamp / "LaMP_2_time" / "dev" / "dev_questions.json"
    questions = json.loads(path.read_text(encoding="utf-8"))
    tagged, broken = questions[0], questions[1]
    assert tagged["user_id"] != broken["user_id"]
    doc = tagged["profile"][0]
    doc["tag"] = doc["tag"].title()  # "action" -> "Action"
    broken["input"] = 42
    path.write_text(json.dumps(questions), encoding="utf-8")
    return {"tmp": tmp, "lamp": lamp, "path": path, "tagged": tagged, "doc": doc, "broken": broken}


def _config(flawed: dict, name: str, home: Path, **data: object) -> Path:
    """A prag.toml reading the flawed LaMP folder."""
    data = {"source": "lamp", "lamp_dir": str(flawed["lamp"]), "tasks": TASKS, **data}
    return write_config(flawed["tmp"] / f"{name}.toml", home, generator_backend="fake", data=data)


@pytest.fixture(scope="module")
def lenient(flawed: dict) -> dict:
    """The flawed folder materialized with data.malformed = "set_aside"."""
    home = flawed["tmp"] / "lenient"
    config = _config(flawed, "lenient", home, malformed="set_aside")
    result = materialize_graph(config, TASKS, selection=SELECTION)
    return {"home": home, "config": config, "result": result, "db": home / "prag.duckdb"}


def test_strict_run_fails_before_anything_is_written_and_names_the_setting(flawed: dict) -> None:
    home = flawed["tmp"] / "strict"
    result = materialize_graph(_config(flawed, "strict", home), TASKS, selection=SELECTION, raise_on_error=False)
    assert not result.success
    (failure,) = result.get_step_failure_events()
    message = failure.event_specific_data.error.to_string()
    tagged, doc = flawed["tagged"], flawed["doc"]
    where = (f"record id '{tagged['id']}'", f"field 'profile doc '{doc['id']}'.tag'")
    for part in ("LampDataError", str(flawed["path"]), *where, f"{doc['tag']!r} is not a LaMP-2 label", *SETTING):
        assert part in message, (part, message)
    assert not result.asset_materializations_for_node("lamp_samples")
    assert not result.asset_materializations_for_node("profile_documents")
    db = home / "prag.duckdb"
    assert not db.exists() or not any(rows for rows, _ in table_checksums(db).values())


def test_set_aside_run_completes_and_the_table_holds_the_records(flawed: dict, lenient: dict) -> None:
    result = lenient["result"]
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)
    tagged, doc, broken = flawed["tagged"], flawed["doc"], flawed["broken"]
    with duckdb.connect(str(lenient["db"]), read_only=True) as con:
        rows = con.execute("SELECT task, split, file, record_id, user_id, field, reason, dropped FROM "
                           "set_aside_records ORDER BY record_id").fetchall()  # fmt: skip
        dev = {s for (s,) in con.execute("SELECT sample_id FROM lamp_samples WHERE task = 'LaMP-2' AND split = 'dev'")
               .fetchall()}  # fmt: skip
        listed = {d for (d,) in con.execute("SELECT doc_id FROM lamp_sample_profiles WHERE sample_id = ?",
                                            [tagged["id"]]).fetchall()}  # fmt: skip
    path = str(flawed["path"])
    assert rows == [
        ("LaMP-2", "dev", path, tagged["id"], tagged["user_id"], f"profile doc '{doc['id']}'.tag",
         f"{doc['tag']!r} is not a LaMP-2 label {rows[0][6][rows[0][6].index('['):]}", "document"),
        ("LaMP-2", "dev", path, broken["id"], broken["user_id"], "input", "wrong type int", "question"),
    ]  # fmt: skip
    assert "'action'" in rows[0][6]  # the allowed values
    assert broken["id"] not in dev and tagged["id"] in dev and len(dev) == 2
    assert doc["id"] not in listed and len(listed) == len(tagged["profile"]) - 1
    metadata = partition_metadata(result, "lamp_samples")
    assert {task: m["set_aside_records"] for task, m in metadata.items()} == {"LaMP-2": 2, "LaMP-3": 0}
    (materialization,) = [m for m in result.asset_materializations_for_node("lamp_samples") if "malformed_policy" in
                          m.metadata][:1]  # fmt: skip
    assert materialization.metadata["malformed_policy"].value == "set_aside"


def test_report_and_run_summary_count_the_records_per_task(lenient: dict, monkeypatch, capsys) -> None:
    """`prag report` (here before any evaluation) and the closing lines of `prag materialize`: one line per task
    with set-aside records, none for the others."""
    from prag_assets.cli import main
    from prag_assets.cli.run_summary import print_summary
    from prag_models.config.settings import load_settings

    monkeypatch.setenv("PRAG_CONFIG", str(lenient["config"]))
    monkeypatch.setenv("PRAG_HOME", str(lenient["home"]))
    assert main(["report"]) == 1  # no evaluation yet, said on stderr
    report = capsys.readouterr()
    assert LINE in report.out and "LaMP-3:" not in report.out and "no evaluation yet" in report.err
    print_summary(load_settings(lenient["config"]), [], 1.0, 0, verdict=False)
    out = capsys.readouterr().out
    assert LINE in out and "LaMP-3:" not in out


def test_forget_deletes_the_users_set_aside_rows_for_good(flawed: dict, lenient: dict) -> None:
    from prag_models.privacy.forget import forget

    home = flawed["tmp"] / "forget"
    shutil.copytree(lenient["home"], home)
    user = flawed["broken"]["user_id"]
    with duckdb.connect(str(home / "prag.duckdb")) as con:
        erasure = forget(con, user, "LaMP-2")
        left = con.execute("SELECT user_id FROM set_aside_records").fetchall()
    assert erasure.deleted.get("set_aside_records") == 1 and left == [(flawed["tagged"]["user_id"],)]
    config = _config(flawed, "forget", home, malformed="set_aside")
    result = materialize_graph(config, TASKS, selection=["lamp_samples"])
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        assert con.execute("SELECT user_id FROM set_aside_records").fetchall() == left
    assert partition_metadata(result, "lamp_samples")["LaMP-2"]["set_aside_records"] == 1
