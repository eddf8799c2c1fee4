"""The dynamic-user stage functions on a tiny DuckDB: drop-folder ingestion, drift, the clustering snapshot, and
what the history sensor reads (no Dagster, no model)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from prag_models.data.history import inbox_dir
from prag_models.stages import history as stages
from prag_models.users.incremental import STATE_TABLE, ensure_tables

DOC = {"user_id": "u1", "id": "d9", "description": "a crew lost far from home", "tag": "sci-fi"}


@pytest.fixture
def con(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """A file with two clustered users of LaMP-2 and the incremental tables."""
    with duckdb.connect(str(tmp_path / "prag.duckdb")) as con:
        con.execute("CREATE TABLE user_clusters AS SELECT * FROM (VALUES ('LaMP-2', 'u1', 0), ('LaMP-2', 'u2', 1)) "
                    "t(task, user_id, cluster)")  # fmt: skip
        con.execute("CREATE TABLE user_embeddings AS SELECT * FROM (VALUES ('LaMP-2', 'u1', [1.0, 0.0]::FLOAT[]), "
                    "('LaMP-2', 'u2', [0.0, 1.0]::FLOAT[])) t(task, user_id, embedding)")  # fmt: skip
        ensure_tables(con)
        yield con


def test_drift_rows_and_the_snapshot(con) -> None:
    row, summary = stages.task_drift(con, "LaMP-2", "run-1")
    assert summary["note"] == "no previous clustering" and row["run_id"] == "run-1" and "note" not in row
    assert stages.append_drift(con, [row]) == 1 and stages.append_drift(con, []) == 0
    assert stages.snapshot_clustering(con, "LaMP-2") == 2
    assert con.execute(f"SELECT user_id, fit_cluster, cluster FROM {STATE_TABLE} ORDER BY 1").fetchall() == [
        ("u1", 0, 0), ("u2", 1, 1)]  # fmt: skip
    con.execute("UPDATE user_clusters SET cluster = 1 - cluster")  # renumbered: the same partition of users
    row, summary = stages.task_drift(con, "LaMP-2", "run-2")
    assert "note" not in summary and summary["changed_share"] == 0 and summary["adjusted_rand"] == 1
    stages.append_drift(con, [row])
    assert con.execute("SELECT run_id FROM cluster_drift ORDER BY computed_at").fetchall() == [("run-1",), ("run-2",)]


def test_inbox_ingestion_and_what_the_sensor_sees(con, tmp_path: Path) -> None:
    home = tmp_path / "home"
    folder = inbox_dir(home, "LaMP-2")
    folder.mkdir(parents=True)
    (folder / "good.json").write_text(json.dumps([DOC]), encoding="utf-8")
    (folder / "bad.json").write_text("{", encoding="utf-8")
    assert stages.pending_changes(con, ["LaMP-2"], {}) == ({}, {}, {})  # no history table yet
    errors: list[str] = []
    results, bad = stages.ingest_inbox(con, home, "LaMP-2", "error", errors.append)
    assert [p.name for p, _ in bad] == ["bad.json"] and any("rejected bad.json" in e for e in errors)
    assert [p.name.split("_", 1)[1] for p in (folder / "done").iterdir()] == ["good.json"]
    assert sorted(p.name.split("_", 1)[1] for p in (folder / "rejected").iterdir()) == ["bad.json",
                                                                                        "bad.json.error.txt"]
    stats = stages.ingest_stats(con, home, "LaMP-2", results, len(bad))
    assert stats["files_ingested"] == 1 and stats["history_rows"] == 1 and stats["files_rejected"] == 1
    assert "text" not in stages.latest_history(con).columns
    changed, waiting, seq = stages.pending_changes(con, ["LaMP-2"], {})
    assert changed == {"LaMP-2": ["u1"]} and not waiting and seq == {"LaMP-2": 1}
    assert stages.pending_changes(con, ["LaMP-2"], seq)[0] == {}  # nothing after the cursor
    con.execute("DELETE FROM user_clusters")
    changed, waiting, seq = stages.pending_changes(con, ["LaMP-2"], {})
    assert not changed and "no user clusters" in waiting["LaMP-2"] and seq == {}  # the cursor stays


def _doc(user: str, doc: str, date: str | None, text: str) -> dict:
    """A profile_documents row (its position is set by the merge)."""
    from prag_models.storage.hashing import content_hash

    return {"task": "LaMP-2", "user_id": user, "doc_id": doc, "date": date, "position": 0, "text": text,
            "fields_json": "{}", "content_hash": content_hash(text)}  # fmt: skip


def test_a_full_run_includes_the_latest_history_and_leaves_nothing_pending(con) -> None:
    """profile_documents = LaMP ∪ the latest version of each history document, merged by date as the incremental
    update merges them: an edit replaces its id, a version the LaMP files already hold is no change, a new user gets
    its documents; afterwards nothing is pending (issue 48)."""
    import pandas as pd

    from prag_models.data.history import HistoryBatch, HistoryDoc, append_history
    from prag_models.data.history_documents import latest_history, with_history
    from prag_models.storage.hashing import content_hash
    from prag_models.users.incremental import pending_history

    lamp = pd.DataFrame([_doc("u1", "a", "2020-01-01", "first"), _doc("u1", "b", "2021-01-01", "second")])
    lamp["position"] = [0, 1]

    def batch(name: str, *docs: tuple[str, str, str | None, str]) -> HistoryBatch:
        return HistoryBatch(name, "LaMP-2", f"LaMP-2-{name}",
                            tuple(HistoryDoc(u, d, date, {}, text, content_hash(text)) for u, d, date, text in docs))

    append_history(con, [batch("w1", ("u1", "n", "2020-06-01", "draft"), ("u1", "a", "2020-01-01", "first")),
                         batch("w2", ("u1", "n", "2020-06-01", "new"), ("u1", "b", "2019-01-01", "edited"),
                               ("u9", "x", None, "newcomer"))])  # fmt: skip
    frame, stats = with_history("LaMP-2", lamp, latest_history(con, "LaMP-2"))
    rows = [(r.user_id, r.doc_id, r.position, r.text) for r in frame.itertuples()]
    assert rows == [("u1", "b", 0, "edited"), ("u1", "a", 1, "first"), ("u1", "n", 2, "new"),
                    ("u9", "x", 0, "newcomer")]  # fmt: skip
    assert stats == {"history_documents": 3, "history_users": 2, "history_new_users": 1, "history_seq": 5}
    assert with_history("LaMP-2", lamp, latest_history(con, "LaMP-2").iloc[0:0])[0].equals(lamp)  # no history
    con.register("_frame", frame)
    con.execute("CREATE TABLE profile_documents AS SELECT * FROM _frame")
    assert pending_history(con, "LaMP-2").empty  # what the full run included is never applied again
