"""Ingestion of new profile documents: the JSON format, validation errors naming file/record/field, nothing written."""

import json

import duckdb
import pytest
from conftest import materialize_graph

from prag_assets.cli import main
from prag_models.config.settings import load_settings
from prag_models.data.history import HISTORY_TABLE, inbox_dir, parse_history_file
from prag_models.data.tasks import LampDataError

GOOD = [
    {"user_id": "u0001", "id": "h1", "date": "2024-05-01", "description": "a crew lost far from home", "tag": "sci-fi"},
    {"user_id": "new-user", "id": 7, "description": "a heist that goes wrong", "tag": "twist ending"},
]


def _write(path, records) -> str:
    path.write_text(json.dumps(records) if not isinstance(records, str) else records, encoding="utf-8")
    return str(path)


def _history_rows(config) -> int:
    db = load_settings(config).duckdb_path
    if not db.exists():
        return 0
    with duckdb.connect(str(db), read_only=True) as con:
        tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        return con.execute(f"SELECT count(*) FROM {HISTORY_TABLE}").fetchone()[0] if HISTORY_TABLE in tables else 0


def test_parse_good_file(tmp_path):
    """Both id spellings, optional date, rendered text and hash as the LaMP loader makes them."""
    batch = parse_history_file(_write(tmp_path / "new.json", GOOD), "LaMP_2")
    assert batch.task == "LaMP-2" and batch.batch_id.startswith("LaMP-2-") and len(batch.docs) == 2
    first, second = batch.docs
    assert first.text == "'description': a crew lost far from home 'tag': sci-fi" and first.date == "2024-05-01"
    assert second.doc_id == "7" and second.date is None and len(second.content_hash) == 32
    rating = parse_history_file(_write(tmp_path / "r.json", [{"user_id": 1, "id": 2, "text": "ok", "score": 4}]), "3")
    assert rating.docs[0].fields == {"text": "ok", "score": "4"}


BAD = [
    ('{"user_id": "u1", ', "invalid JSON at line 1", None, None),
    ({"user_id": "u1"}, "top level", "<root>", "must be a list"),
    ([], "top level", "<root>", "empty list"),
    ([GOOD[0], {"user_id": "u2", "id": "x", "description": "d"}], "record #1 (user 'u2', id 'x')", "tag", "missing"),
    ([{"id": "x", "description": "d", "tag": "t"}], "record #0 (id 'x')", "user_id", "is missing"),
    ([{"user_id": "u2", "id": "", "description": "d", "tag": "t"}], "record #0 (user 'u2')", "id", "non-empty"),
    ([{"user_id": "u2", "id": "x", "description": 3, "tag": "t"}], "record #0", "description", "wrong type int"),
    ([{"user_id": "u2", "id": "x", "description": "d", "tag": "comedy", "date": [2020]}], "record #0", "date",
     "wrong type"),
    ([{"user_id": "u2", "id": "x", "description": " ", "tag": ""}], "record #0", "tag", "is not a LaMP-2 label"),
    ([{"user_id": "u2", "id": "x", "description": "d", "tag": "horror"}], "record #0", "tag", "'horror' is not"),
    ([{"user_id": "u2", "id": "x", "description": "d", "tag": "comedy", "date": "soon"}], "record #0", "date",
     "'soon' is not a date in an accepted format"),
    ([{"user_id": "u2", "id": "x\ud800", "description": "d", "tag": "comedy"}], "record #0 (user 'u2')", "id",
     "lone surrogate U+D800"),
    ([GOOD[0], GOOD[0]], "record #1 (user 'u0001', id 'h1')", "id", "duplicate document id 'h1'"),
    (["text"], "record #0", "<record>", "must be an object"),
]


@pytest.mark.parametrize(("content", "record", "field", "problem"), BAD)
def test_bad_records_fail_clearly_and_write_nothing(tmp_path, tiny_config, monkeypatch, capsys, content, record, field,
                                                     problem):
    """Every malformed input names the file, the record and the field; the CLI exits 2 and writes nothing."""
    bad = _write(tmp_path / "bad.json", content)
    with pytest.raises(LampDataError) as info:
        parse_history_file(bad, "LaMP-2")
    message = str(info.value)
    assert message.startswith(f"{bad}: ") and record in message
    if field:
        assert f"field '{field}'" in message
    if problem:
        assert problem in message
    monkeypatch.setenv("PRAG_CONFIG", str(tiny_config))
    good = _write(tmp_path / "good.json", GOOD)
    assert main(["ingest", good, bad, "--task", "LaMP-2"]) == 2  # one bad file: not even the good one is written
    assert "bad.json" in capsys.readouterr().err
    assert _history_rows(tiny_config) == 0


def test_unknown_task_is_rejected(tmp_path, tiny_config, monkeypatch, capsys):
    """A task that does not exist fails before reading the data."""
    monkeypatch.setenv("PRAG_CONFIG", str(tiny_config))
    assert main(["ingest", _write(tmp_path / "g.json", GOOD), "--task", "LaMP-9"]) == 2
    assert "unknown LaMP task" in capsys.readouterr().err and _history_rows(tiny_config) == 0


def test_cli_appends_with_timestamp_and_batch_id(tmp_path, tiny_config, monkeypatch, capsys):
    """Rows land in profile_history with seq, batch id and time; the same file again is skipped."""
    monkeypatch.setenv("PRAG_CONFIG", str(tiny_config))
    path = _write(tmp_path / "good.json", GOOD)
    assert main(["ingest", path, "--task", "LaMP-2"]) == 0
    assert main(["ingest", path, "--task", "LaMP-2"]) == 0
    out = capsys.readouterr().out
    assert "2 documents appended" in out and "already ingested, skipped" in out
    with duckdb.connect(str(load_settings(tiny_config).duckdb_path), read_only=True) as con:
        rows = con.execute(f"SELECT * FROM {HISTORY_TABLE} ORDER BY seq").df()
    assert rows["seq"].tolist() == [1, 2] and rows["batch_id"].nunique() == 1
    assert rows["ingested_at"].notna().all() and set(rows["user_id"]) == {"u0001", "new-user"}
    assert rows["source"].iloc[0] == path and rows["task"].eq("LaMP-2").all()


def test_drop_folder_ingests_good_files_and_rejects_bad_ones(tmp_path, tiny_config):
    """profile_history reads <home>/inbox/<task>/: good files to done/, bad ones to rejected/ with the error."""
    inbox = inbox_dir(load_settings(tiny_config).home_path, "LaMP-2")
    inbox.mkdir(parents=True)
    _write(inbox / "a.json", GOOD)
    _write(inbox / "b.json", [{"user_id": "u3", "id": "d", "description": "x"}])
    result = materialize_graph(tiny_config, ["LaMP-2"], selection=["profile_history"])
    assert result.success
    check = next(e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION")
    assert check.passed is False and check.severity.value == "WARN"
    assert [p.name for p in inbox.glob("*.json")] == []
    assert [p.name.split("_", 1)[1] for p in (inbox / "done").glob("*.json")] == ["a.json"]
    errors = list((inbox / "rejected").glob("*.error.txt"))
    assert len(errors) == 1 and "field 'tag': missing LaMP-2 field" in errors[0].read_text()
    assert _history_rows(tiny_config) == 2
