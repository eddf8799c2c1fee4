"""Erasure that erases (docs/privacy.md, issue 51): after `prag forget`, no file under the prag home holds a byte of
the erased user's documents or inputs: not the live DuckDB file (its freed blocks included), its WAL, the readers'
snapshot, the MLflow store and artifacts, the cache files, the reports or Dagster's records (event log, compute
logs: no user text reaches them at all); not the LLM cache entries whose prompt holds one of the user's documents
cut short by the prompt budget. And the file is rewritten crash-safely."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import ROOT, materialize_graph, write_config

from prag_assets.cli.commands import dagster_env
from prag_models.config.settings import load_settings
from prag_models.data.history import inbox_dir
from prag_models.data.source import demo_root
from prag_models.storage.store import snapshot_path
from privacy.helpers import edit_questions

pytestmark = pytest.mark.models

TASK = "LaMP-2"
ERASED = "u0001"  # one of the users of the LLM evaluation's samples: its inputs reach every LLM cache
CFRAG = {"epochs": 2, "reranker_layers": 1, "reranker_max_length": 64}
#: A text this long never fits the prompt budget below: prompts show its head (with its marker), never its tail.
FILLER = " ".join(f"w{i % 97} plain words of a long review" for i in range(120))


def _plant(root: Path) -> dict[str, str]:
    """Put a distinctive string at the head and the tail of each of the erased user's inputs and documents, made too
    long for any prompt; returns plant -> what it marks."""
    plants: dict[str, str] = {}

    def edit(q: dict, _side: dict) -> None:
        if q["user_id"] != ERASED:
            return
        head, tail = f"zqinputhead{q['id']}q", f"zqinputtail{q['id']}q"
        q["input"] = q["input"].replace("description: ", f"description: {head} ", 1) + f" {FILLER} {tail}"
        plants.update({head: "input head", tail: "input tail"})
        for doc in q["profile"]:
            head, tail = f"zqdochead{doc['id']}q", f"zqdoctail{doc['id']}q"
            doc["description"] = f"{head} {doc['description']} {FILLER} {tail}"
            plants.update({head: "document head", tail: "document tail"})

    edit_questions(root, edit)
    return plants


def _drop_files(home: Path, plants: dict[str, str]) -> Path:
    """Two drop-folder files of the erased user, each with a plant: a new document (ingested, then applied by the
    incremental update) and a record whose bad date is the plant (rejected with its reason); returns the folder."""
    inbox = inbox_dir(home, TASK)
    inbox.mkdir(parents=True)
    doc, date = "zqhistorydocq", "zqbaddateq"
    good = {"user_id": ERASED, "id": "h-planted", "date": "2024-05-01", "description": f"{doc} a crew far from home",
            "tag": "sci-fi"}  # fmt: skip
    (inbox / "a_history.json").write_text(json.dumps([good]), encoding="utf-8")
    (inbox / "b_bad.json").write_text(json.dumps([{**good, "id": "h-bad", "date": date}]), encoding="utf-8")
    plants.update({doc: "history document", date: "rejected value"})
    return inbox


def _held(data: bytes, plants: dict[str, str]) -> list[str]:
    """The plants a file's bytes hold."""
    return [p for p in plants if p.encode() in data]


def _table_hits(path: Path, plants: dict[str, str]) -> list[str]:
    """table.column of every VARCHAR column (of a DuckDB file) with a row holding a plant, and how many rows."""
    found = []
    with duckdb.connect(str(path), read_only=True) as con:
        cols = con.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE schema_name = 'main' "
                           "AND data_type = 'VARCHAR'").fetchall()  # fmt: skip
        for table, col in cols:
            sql = f'SELECT count(*) FROM "{table}" WHERE regexp_matches("{col}", ?)'
            n = con.execute(sql, ["|".join(plants)]).fetchall()[0][0]
            found += [f"{table}.{col}: {n} rows"] if n else []
    return found


def _cache_entries(path: Path, plants: dict[str, str]) -> tuple[dict[str, int], dict[str, int], int, int]:
    """Per cache (generator id suffix): entries holding a plant, and those showing an input's or a document's head but
    not its tail (cut short by the budget); how many of the latter are other users' prompts; the entries without
    provenance."""
    heads = [p for p, kind in plants.items() if kind.endswith("head")]
    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute("SELECT generator_id, prompt, users FROM generation_cache").fetchall()
    held: dict[str, int] = {}
    cut: dict[str, int] = {}
    foreign = 0
    for generator_id, prompt, users in rows:
        cache = generator_id.partition("#")[2] or "answers"
        if any(p in prompt for p in plants):
            held[cache] = held.get(cache, 0) + 1
            assert ERASED in users, f"{cache} entry shows {ERASED}'s text, provenance {users}"
        if any(h in prompt and h.replace("head", "tail") not in prompt for h in heads):
            cut[cache] = cut.get(cache, 0) + 1
            foreign += users != [ERASED]
    return held, cut, foreign, sum(users is None for _, _, users in rows)


def _dagster_files(home: Path) -> list[Path]:
    """The files of the home's Dagster instance (event log and run storage, compute logs)."""
    return [p for p in (home / "dagster").rglob("*") if p.is_file()]


def test_forget_leaves_no_byte_of_the_user_in_any_file(tmp_path, monkeypatch) -> None:
    import dagster as dg

    home = tmp_path / "home"
    config = write_config(tmp_path / "prag.toml", home, generator_backend="fake", data={"tasks": [TASK]},
                          cfrag=CFRAG, prompt={"max_prompt_tokens": 160})  # fmt: skip
    settings = load_settings(config)
    source = demo_root(settings)  # the input files themselves hold the plants, by design: not searched
    plants = _plant(source)
    inbox = _drop_files(home, plants)  # the user's own files in the drop folder, like the source: not searched
    for name in ("DAGSTER_HOME", "PRAG_DAGSTER_STORAGE", "PRAG_DAGSTER_LOGS"):  # the instance `prag materialize` uses
        monkeypatch.setenv(name, dagster_env(settings, warn=False)[name])
    with dg.DagsterInstance.get() as instance:
        assert materialize_graph(config, [TASK], instance=instance).success
    dagster = _dagster_files(home)
    assert any(p.suffix == ".db" for p in dagster) and any(p.suffix in (".err", ".out") for p in dagster), dagster
    # by construction: no user text in Dagster's metadata or logs, so there is nothing there to erase
    quoted = {str(p.relative_to(home)): found for p in dagster if (found := _held(p.read_bytes(), plants))}
    assert quoted == {}, f"Dagster's records quote the user's text: {quoted}"
    user_id = re.compile(rb"(?<![\\\w])" + re.escape(ERASED.encode()) + rb"(?!\w)")  # not inside "\u0001", "u00012"
    named = [str(p.relative_to(home)) for p in dagster if user_id.search(p.read_bytes())]
    assert named == [], f"Dagster's records name the user (metadata and logs carry counts, not ids): {named}"
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:  # the drop folder's files were used
        history = con.execute("SELECT count(*) FROM profile_documents WHERE doc_id = 'h-planted'").fetchall()[0][0]
    assert history == 1 and len(list((inbox / "rejected").glob("*_b_bad.json"))) == 1
    live = settings.duckdb_path
    held, cut, foreign, unknown = _cache_entries(live, plants)
    # the LLM work filled every cache with the user's text, cut short by the budget, some in other users' prompts
    assert {"answers", "utility-v2", "gold_loglik"} <= set(held), held
    assert {"utility-v2", "gold_loglik"} <= set(cut) and foreign, (cut, foreign)
    assert unknown == 0, f"{unknown} cache entries without provenance: a call site does not record it"
    with duckdb.connect(str(live), read_only=True) as con:
        cached = con.execute("SELECT count(*) FROM generation_cache").fetchall()[0][0]
    from prag_assets.cli.forget import run_forget
    from prag_assets.cli.sql import run_sql
    from prag_models.privacy.rules import publish_readers_snapshot

    monkeypatch.setenv("PRAG_CONFIG", str(config))
    snapshot = snapshot_path(live)
    if not snapshot.exists():  # the readers' snapshot must come out clean too
        publish_readers_snapshot(live)
    assert run_forget(ERASED) == 0
    files = [p for p in home.rglob("*") if p.is_file() and source not in p.parents and inbox not in p.parents]
    assert live in files and snapshot in files and (home / "mlflow.db") in files
    assert set(_dagster_files(home)) <= set(files)  # Dagster's records are searched too
    assert any("mlflow-artifacts" in p.parts for p in files) and any("reports" in p.parts for p in files)
    leaks = {str(p.relative_to(home)): found for p in files if (found := _held(p.read_bytes(), plants))}
    assert leaks == {}, f"files holding the erased user's text: {leaks}"
    assert _table_hits(live, plants) == [] and _table_hits(snapshot, plants) == []
    with duckdb.connect(str(live), read_only=True) as con:  # by provenance: the other users' entries stay
        kept = con.execute("SELECT count(*) FROM generation_cache").fetchall()[0][0]
    assert 0 < kept <= cached - sum(held.values())
    assert run_sql(f"SELECT content FROM read_blob('{live}')") == 1


#: A forget-like run in another process: delete the planted row, then compact the file, dying at ``point``.
_CRASH = """
import os, sys
import duckdb
from prag_models.privacy import forget
path, point = sys.argv[1], sys.argv[2]
real = os.replace
def replace(a, b):
    if point == "before_rename":
        os._exit(137)
    real(a, b)
    if point == "after_rename":
        os._exit(137)
forget.os.replace = replace
con = duckdb.connect(path)
con.execute("DELETE FROM t WHERE text LIKE 'zqgone%'")
forget.compact_file(con, path)
"""


@pytest.mark.parametrize("point", ["before_rename", "after_rename", "none"])
def test_compaction_leaves_the_old_file_or_the_new_one_whole(tmp_path, point) -> None:
    """A process killed at any point of the rewrite leaves a complete file (the old one with the deletion
    committed, or the new one without the deleted bytes), never a WAL of one file beside the other; running the
    rewrite again finishes it."""
    from prag_models.privacy.forget import compact_file

    path = tmp_path / "prag.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE t AS SELECT CASE WHEN range % 10 = 0 THEN 'zqgone' ELSE 'kept' END || range AS text "
                    "FROM range(5000)")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _CRASH, str(path), point], env=env, timeout=120)
    assert done.returncode == (0 if point == "none" else 137)
    assert not path.with_name(path.name + ".wal").exists()
    with duckdb.connect(str(path)) as con:
        assert con.execute("SELECT count(*), count(*) FILTER (text LIKE 'zqgone%') FROM t").fetchall() == [(4500, 0)]
        if point == "before_rename":  # the old file: the deletion is committed, its bytes are still there
            assert path.with_name(path.name + ".compact").exists() and b"zqgone" in path.read_bytes()
            compact_file(con, path)
    assert b"zqgone" not in path.read_bytes() and not path.with_name(path.name + ".compact").exists()
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM t").fetchall() == [(4500,)]
