"""The history drop folder never blocks on a bad file: each failing file goes to rejected/ with its .error.txt, the
others are ingested, symbolic links are refused (never followed), and the sensor keeps ticking."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import duckdb
from conftest import materialize_graph

from prag_models.config.settings import load_settings
from prag_models.data.history import HISTORY_TABLE, inbox_dir, inbox_entries

GOOD = [{"user_id": "u0001", "id": "h1", "date": "2024-05-01", "description": "a crew far from home", "tag": "sci-fi"}]
BAD: dict[str, tuple[str | bytes, str]] = {  # file name -> (content, what its .error.txt must say)
    "b_surrogate.json": (json.dumps([{**GOOD[0], "id": "h2", "description": "caf\ud800"}]), "lone surrogate U+D800"),
    "c_nul.json": (json.dumps([{**GOOD[0], "id": "h3\x00"}]), "field 'id': contains a NUL character"),
    "d_not_utf8.json": (b'[{"user_id": "caf\xe9"}]', "not valid UTF-8: byte 0xe9"),
    "e_invalid.json": ('[{"user_id": "u1",', "invalid JSON at line 1"),
    "f_bad_date.json": (json.dumps([{**GOOD[0], "id": "h4", "date": "soon"}]), "'soon' is not a date"),
    "g_bad_label.json": (json.dumps([{**GOOD[0], "id": "h5", "tag": "horror"}]), "field 'tag'"),
}


def _history(config: Path) -> list[tuple[str, str]]:
    with duckdb.connect(str(load_settings(config).duckdb_path), read_only=True) as con:
        return con.execute(f"SELECT user_id, doc_id FROM {HISTORY_TABLE} ORDER BY seq").fetchall()


def test_bad_files_are_rejected_the_others_ingested_and_links_refused(tmp_path: Path, tiny_config: Path) -> None:
    inbox = inbox_dir(load_settings(tiny_config).home_path, "LaMP-2")
    inbox.mkdir(parents=True)
    (inbox / "a_good.json").write_text(json.dumps(GOOD), encoding="utf-8")
    (inbox / "z_good.json").write_text(json.dumps([{**GOOD[0], "id": "h9"}]), encoding="utf-8")
    for name, (content, _) in BAD.items():
        path = inbox / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content, encoding="utf-8")
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps([{**GOOD[0], "id": "stolen"}]), encoding="utf-8")
    os.symlink(outside, inbox / "h_link.json")
    files, refused = inbox_entries(load_settings(tiny_config).home_path, "LaMP-2")
    assert [p.name for p, _ in refused] == ["h_link.json"] and "h_link.json" not in [p.name for p in files]

    result = materialize_graph(tiny_config, ["LaMP-2"], selection=["profile_history"])

    assert result.success
    assert _history(tiny_config) == [("u0001", "h1"), ("u0001", "h9")]  # both good files, nothing from the link
    assert list(inbox.glob("*.json")) == []
    done = sorted(p.name.split("_", 1)[1] for p in (inbox / "done").glob("*.json"))
    assert done == ["a_good.json", "z_good.json"]
    rejected = inbox / "rejected"
    for name, (_, problem) in {**BAD, "h_link.json": ("", "refused: a symbolic link")}.items():
        (moved,) = rejected.glob(f"*_{name}")
        error = moved.with_name(moved.name + ".error.txt").read_text(encoding="utf-8")
        assert problem in error, (name, error)
    link = next(rejected.glob("*_h_link.json"))
    assert link.is_symlink() and outside.exists()  # the link itself was moved; its target was never touched
    check = next(e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION")
    assert check.passed is False and len(check.metadata["rejected"].value.splitlines()) == len(BAD) + 1


def test_sensor_keeps_ticking_with_bad_files_and_links(tmp_path: Path, tiny_config: Path, monkeypatch) -> None:
    """A tick with an invalid file and a dangling symbolic link requests one run (which rejects them); no error."""
    from prag_assets.automation.sensors import profile_history_sensor
    from prag_assets.resources.settings import PragSettingsResource

    inbox = inbox_dir(load_settings(tiny_config).home_path, "LaMP-2")
    inbox.mkdir(parents=True)
    (inbox / "bad.json").write_text('[{"user_id": "caf\\ud800"', encoding="utf-8")
    os.symlink(tmp_path / "missing.json", inbox / "dangling.json")
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources={
            "prag_settings": PragSettingsResource(config_file=str(tiny_config))})  # fmt: skip
        result = profile_history_sensor(context)
    assert len(result.run_requests) == 1 and result.run_requests[0].tags["prag/inbox_files"] == "2"
    assert (inbox / "dangling.json").is_symlink() and not (tmp_path / "missing.json").exists()
