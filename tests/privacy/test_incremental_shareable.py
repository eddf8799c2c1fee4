"""The incremental update (`prag ingest`, the drop folder, `prag lifecycle`: users/incremental.update_users) places
users by the rule of the full stage (prag_models/privacy/shareable.py, docs/privacy.md, issue 51): z_u is the mean of
the user's shareable documents, else of its questions, and a user known only from documents others may not see gets
no z_u — no cluster, no neighbour list, nobody's neighbour — while its documents still serve its own retrieval.

A tiny LaMP-2 demo is materialized up to the clustering once; each test applies a week of history to a copy of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from conftest import check_results, materialize_graph, write_config

from prag_models.config.settings import load_settings
from prag_models.data.history import ingest_files
from prag_models.storage.store import connect

pytestmark = pytest.mark.models  # materializes the graph with the real embedder (the fast tier leaves it out)

TASK = "LaMP-2"
BASE = ["lamp_samples", "profile_documents", "document_embeddings", "query_embeddings", "user_embeddings",
        "user_clusters", "similar_users", "cluster_drift", "cluster_state"]  # fmt: skip
INCREMENTAL = ["profile_history", "incremental_user_clusters", "incremental_similar_users"]
#: New users whose documents others may not see: all private, or an owner who does not share.
HIDDEN = ("private-only", "opted-out-new")
#: The tables that place users among the others.
PLACING = ("user_embeddings", "user_clusters", "cluster_state", "similar_users")


@pytest.fixture(scope="module")
def base_home(tmp_path_factory) -> Path:
    """A tiny LaMP-2 demo materialized up to similar users and the clustering snapshot, once per module."""
    root = tmp_path_factory.mktemp("base")
    config = write_config(root / "prag.toml", root / "home", generator_backend="fake", data={"tasks": [TASK]})
    assert materialize_graph(config, [TASK], selection=BASE).success
    return root / "home"


def _world(base_home: Path, root: Path) -> Path:
    """A private copy of the materialized home and its prag.toml."""
    shutil.copytree(base_home, root / "home")
    return write_config(root / "prag.toml", root / "home", generator_backend="fake", data={"tasks": [TASK]})


def _docs_like(config: Path, source_user: str, user: str, prefix: str, n: int = 3, **extra) -> list[dict]:
    """n history records for ``user`` copied from another user's documents (fresh ids; cycled), with ``extra``."""
    with connect(load_settings(config).duckdb_path, read_only=True) as con:
        rows = con.execute("SELECT date, fields_json FROM profile_documents WHERE task = ? AND user_id = ? "
                           "ORDER BY position", [TASK, source_user]).fetchall()  # fmt: skip
    assert rows, f"{source_user} has no documents"
    picked = [rows[i % len(rows)] for i in range(n)]
    return [{"user_id": user, "id": f"{prefix}{i}", "date": date, **json.loads(fields), **extra}
            for i, (date, fields) in enumerate(picked)]  # fmt: skip


def _apply(config: Path, records: list[dict]):
    """Ingest the records as one file and run the incremental update of the task, with its checks."""
    path = load_settings(config).home_path / "week2.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    with connect(load_settings(config).duckdb_path) as con:
        ingest_files(con, [path], TASK)
    return materialize_graph(config, [TASK], selection=INCREMENTAL, raise_on_error=False)


def _table(config: Path, sql: str) -> pd.DataFrame:
    with duckdb.connect(str(load_settings(config).duckdb_path), read_only=True) as con:
        return con.execute(sql).df()


def _others(config: Path, table: str, hidden: tuple[str, ...]) -> pd.DataFrame:
    """A placing table's rows of everybody but the hidden users, in a fixed order (vectors as lists)."""
    frame = _table(config, f"SELECT * EXCLUDE (task) FROM {table} WHERE task = '{TASK}'")
    frame = frame.drop(columns=[c for c in ("fitted_at",) if c in frame])
    frame = frame[~frame["user_id"].isin(hidden)]
    for column in ("embedding", "similarity"):
        if column in frame:
            frame[column] = frame[column].map(lambda v: None if v is None or v is pd.NA else
                                              np.round(np.asarray(v, dtype=float), 5).tolist())  # fmt: skip
    return frame.sort_values([c for c in ("user_id", "rank") if c in frame]).reset_index(drop=True).astype(str)


@pytest.mark.parametrize("reference", ["model", "snapshot"])
def test_users_known_only_from_hidden_documents_are_not_placed(base_home, tmp_path, reference) -> None:
    """A week where two new users bring only documents others may not see (private ones; an owner who does not
    share), each a copy of u0003's, beside ordinary shareable documents of an existing and of a new user: the hidden
    users keep their documents for their own retrieval but get no z_u, no cluster, no neighbour list and are nobody's
    neighbour; the checks pass; the shareable documents update their owners as before; and every other user's
    placement is what the same week without the hidden users gives. Both ways of assigning a cluster: the stored
    model, and the refit on the clustering snapshot (cluster_state) when there is no stored model."""
    config, plain = _world(base_home, tmp_path / "hidden"), _world(base_home, tmp_path / "plain")
    if reference == "snapshot":
        for world in (config, plain):
            with connect(load_settings(world).duckdb_path) as con:
                con.execute("DELETE FROM cluster_models")
    ordinary = _docs_like(config, "u0003", "u0000", "h", 4) + _docs_like(config, "u0004", "brand-new", "n")
    hidden = (_docs_like(config, "u0003", "private-only", "p", visibility="private")
              + _docs_like(config, "u0003", "opted-out-new", "o", share=False))  # fmt: skip
    u0000_before = int(_table(config, "SELECT n_docs FROM user_embeddings WHERE user_id = 'u0000'")["n_docs"][0])

    run = _apply(config, ordinary + hidden)

    assert run.success, "the incremental run failed"
    checks = check_results(run)
    assert checks and all(passed for passed, _ in checks.values()), checks
    users = f"({', '.join(repr(u) for u in HIDDEN)})"
    for table in PLACING:
        rows = _table(config, f"SELECT * FROM {table} WHERE task = '{TASK}' AND user_id IN {users}")
        assert rows.empty, f"{table} places a user known only from hidden documents:\n{rows}"
    neighbours = _table(config, f"SELECT * FROM similar_users WHERE neighbour_id IN {users}")
    assert neighbours.empty, f"hidden users are other users' neighbours:\n{neighbours}"
    own = _table(config, f"SELECT user_id, count(*) AS n FROM document_embeddings WHERE user_id IN {users} GROUP BY 1")
    assert dict(zip(own["user_id"], own["n"], strict=True)) == dict.fromkeys(HIDDEN, 3)  # kept for their own retrieval
    log = _table(config, "SELECT user_id, new_cluster, n_docs, reference FROM incremental_updates").set_index("user_id")
    assert set(log["reference"]) == {reference}
    assert log.loc[list(HIDDEN), "new_cluster"].isna().all() and (log.loc[list(HIDDEN), "n_docs"] == 0).all()
    # the shareable documents still update their owners: z_u is the mean of all of them
    for user, added in (("u0000", 4), ("brand-new", 3)):
        docs = _table(config, f"SELECT embedding FROM document_embeddings WHERE user_id = '{user}'")
        row = _table(config, f"SELECT n_docs, embedding FROM user_embeddings WHERE user_id = '{user}'")
        assert int(row["n_docs"][0]) == (u0000_before + added if user == "u0000" else added)
        np.testing.assert_allclose(np.asarray(row["embedding"][0]), np.stack(docs["embedding"]).mean(axis=0),
                                   atol=1e-5)  # fmt: skip
        assert len(_table(config, f"SELECT * FROM user_clusters WHERE user_id = '{user}'")) == 1

    # non-interference: the same week without the hidden users places everybody else identically
    assert _apply(plain, ordinary).success
    for table in PLACING:
        pd.testing.assert_frame_equal(_others(config, table, HIDDEN), _others(plain, table, HIDDEN), obj=table)


def test_a_placed_user_whose_documents_become_hidden_leaves_every_placement(base_home, tmp_path) -> None:
    """A new user placed by its shareable documents (a copy of u0003's: it becomes a neighbour) states the next week
    that it does not share: the update takes its z_u, cluster, snapshot row and neighbour list away, and the lists that
    held it are recomputed without it; the checks pass."""
    config = _world(base_home, tmp_path / "world")
    docs = _docs_like(config, "u0003", "leaver", "l", 4)
    assert _apply(config, docs).success
    assert not _table(config, "SELECT * FROM similar_users WHERE neighbour_id = 'leaver'").empty  # it was placed

    run = _apply(config, _docs_like(config, "u0003", "leaver", "m", 1, share=False))

    assert run.success and all(passed for passed, _ in check_results(run).values()), check_results(run)
    for table in PLACING:
        rows = _table(config, f"SELECT * FROM {table} WHERE task = '{TASK}' AND user_id = 'leaver'")
        assert rows.empty, f"{table} still places a user whose documents others may no longer see:\n{rows}"
    assert _table(config, "SELECT * FROM similar_users WHERE neighbour_id = 'leaver'").empty
    assert len(_table(config, "SELECT * FROM document_embeddings WHERE user_id = 'leaver'")) == 5  # its own retrieval


def test_a_full_run_over_the_history_places_users_by_the_same_rule(base_home, tmp_path) -> None:
    """The same week ingested, then a full run instead of the incremental update (issue 48: profile_documents reads
    LaMP ∪ the latest history versions): the users known only from hidden documents keep their documents for their
    own retrieval and are placed nowhere, the shareable documents place their owners, the checks pass, and nothing is
    left pending for the incremental update."""
    from prag_models.users.incremental import pending_history

    config = _world(base_home, tmp_path / "world")
    ordinary = _docs_like(config, "u0003", "u0000", "h", 4) + _docs_like(config, "u0004", "brand-new", "n")
    hidden = (_docs_like(config, "u0003", "private-only", "p", visibility="private")
              + _docs_like(config, "u0003", "opted-out-new", "o", share=False))  # fmt: skip
    path = load_settings(config).home_path / "week2.json"
    path.write_text(json.dumps(ordinary + hidden), encoding="utf-8")
    with connect(load_settings(config).duckdb_path) as con:
        ingest_files(con, [path], TASK)

    run = materialize_graph(config, [TASK], selection=BASE, raise_on_error=False)

    assert run.success and all(passed for passed, _ in check_results(run).values()), check_results(run)
    users = f"({', '.join(repr(u) for u in HIDDEN)})"
    for table in PLACING:
        rows = _table(config, f"SELECT * FROM {table} WHERE task = '{TASK}' AND user_id IN {users}")
        assert rows.empty, f"{table} places a user known only from hidden documents:\n{rows}"
    assert _table(config, f"SELECT * FROM similar_users WHERE neighbour_id IN {users}").empty
    own = _table(config, f"SELECT user_id, count(*) AS n FROM document_embeddings WHERE user_id IN {users} GROUP BY 1")
    assert dict(zip(own["user_id"], own["n"], strict=True)) == dict.fromkeys(HIDDEN, 3)
    placed = _table(config, "SELECT user_id FROM user_clusters WHERE user_id IN ('u0000', 'brand-new')")
    assert set(placed["user_id"]) == {"u0000", "brand-new"}
    with connect(load_settings(config).duckdb_path, read_only=True) as con:
        assert pending_history(con, TASK).empty
