"""Bounded-memory storage (issue 14): vectors as FLOAT[d] Arrow columns, FLOAT[] files migrated, streamed batches,
SQL content hashes, and incremental neighbour lists equal to a full recomputation."""

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from prag_models.stages.embeddings import SQL_HASH
from prag_models.storage.store import (
    QueryRows,
    column_to_matrix,
    iter_batches,
    matrix_to_column,
    read_arrow,
    replace_rows,
)
from prag_models.text.embedder import content_hash
from prag_models.text.embedding_cache import embed_missing, lookup_embeddings
from prag_models.users.clustering import assign_new_users, cluster_users
from prag_models.users.neighbour_refresh import affected_users
from prag_models.users.similar import neighbour_arrays, neighbour_table


def _types(con, table):
    return {name: kind for name, kind, *_ in con.execute(f"DESCRIBE {table}").fetchall()}


def test_vectors_round_trip_as_fixed_size_arrays():
    con = duckdb.connect()
    m = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    replace_rows(con, "t", pa.table({"task": ["a"] * 5, "embedding": matrix_to_column(m)}), {"task": "a"})
    assert _types(con, "t")["embedding"] == "FLOAT[3]"
    np.testing.assert_array_equal(column_to_matrix(read_arrow(con, "t")["embedding"]), m)


def test_an_older_float_list_table_is_migrated_on_write_and_read_either_way():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (task VARCHAR, embedding FLOAT[])")
    con.execute("INSERT INTO t VALUES ('b', [1, 2]), ('c', [3, 4])")
    assert column_to_matrix(read_arrow(con, "t")["embedding"]).tolist() == [[1, 2], [3, 4]]
    replace_rows(
        con, "t", pa.table({"task": ["a"], "embedding": matrix_to_column(np.ones((1, 2))), "x": [1]}), {"task": "a"}
    )
    assert _types(con, "t")["embedding"] == "FLOAT[2]" and "x" in _types(con, "t")
    con.execute("CREATE TABLE r (task VARCHAR, embedding FLOAT[])")
    con.execute("INSERT INTO r VALUES ('b', [1, 2, 3])")  # another width: stays a list, the insert casts
    replace_rows(con, "r", pa.table({"task": ["a"], "embedding": matrix_to_column(np.ones((1, 2)))}), {"task": "a"})
    assert _types(con, "r")["embedding"] == "FLOAT[]"
    with pytest.raises(ValueError, match="different lengths"):
        column_to_matrix(read_arrow(con, "r")["embedding"])


def test_a_table_first_written_by_an_empty_partition_takes_the_next_partitions_rows(tmp_path):
    """A task with nothing to write (tuning without labels and without a utility budget) may be the first partition
    of a table: its empty frame has no types (DuckDB: NULL columns), and the next task's rows must still land."""
    from prag_models.evaluation.tuning import TUNED_COLUMNS

    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    replace_rows(con, "tuned_settings", pd.DataFrame(columns=TUNED_COLUMNS), {"task": "LaMP-4"})
    row = pd.DataFrame([("LaMP-2", "m", "k", "1", "2", 0.5, 0.4, "label_hit@3", 3, 10)], columns=TUNED_COLUMNS)
    replace_rows(con, "tuned_settings", row, {"task": "LaMP-2"})
    replace_rows(con, "tuned_settings", pd.DataFrame(columns=TUNED_COLUMNS), {"task": "LaMP-5"})  # empty again
    assert con.execute("SELECT task, knob, score FROM tuned_settings").fetchall() == [("LaMP-2", "k", 0.5)]
    assert _types(con, "tuned_settings")["task"] == "VARCHAR" and _types(con, "tuned_settings")["n_trials"] == "BIGINT"


def test_query_rows_are_written_inside_duckdb_and_batches_stream():
    con = duckdb.connect()
    con.execute("CREATE TABLE src AS SELECT i, 'a' AS task FROM range(10) r(i)")
    replace_rows(con, "dst", QueryRows("SELECT task, i FROM src WHERE i < ?", (4,), 4), {"task": "a"})
    assert con.execute("SELECT count(*) FROM dst").fetchall() == [(4,)]
    sizes = [b.num_rows for b in iter_batches(con, "SELECT i FROM src", rows=3)]
    assert sum(sizes) == 10 and max(sizes) <= 3


def test_sql_hash_equals_content_hash():
    text = "Ünïcode — text"
    assert duckdb.connect().execute(f"SELECT {SQL_HASH.format('?')}", [text]).fetchall()[0][0] == content_hash(text)


def test_embed_missing_embeds_only_new_texts_in_chunks():
    con = duckdb.connect()
    con.execute("CREATE TABLE docs (content_hash VARCHAR, text VARCHAR)")
    texts = [f"text {i % 7}" for i in range(20)]
    con.executemany("INSERT INTO docs VALUES (?, ?)", [[content_hash(t), t] for t in texts])
    calls = []

    def embed(batch):
        calls.append(len(batch))
        return np.array([[len(t), 1.0] for t in batch], dtype=np.float32)

    assert embed_missing(con, embed, "m", "SELECT * FROM docs", chunk_size=3) == 7 and max(calls) <= 3
    assert embed_missing(con, embed, "m", "SELECT * FROM docs") == 0
    assert lookup_embeddings(con, "m", [content_hash("text 3")]).tolist() == [[6.0, 1.0]]
    with pytest.raises(KeyError):
        lookup_embeddings(con, "m", [content_hash("never seen")])


def test_reduced_clustering_assigns_new_users_in_the_reduced_space():
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((3, 50)) * 5
    x = np.concatenate([c + rng.standard_normal((30, 50)) for c in centres])
    fit = cluster_users(x, min_cluster_size=5, reduce_dims=8)
    assert fit.projection is not None and fit.projection[1].shape == (8, 50)
    assert assign_new_users(fit, centres).tolist() == [fit.labels[0], fit.labels[30], fit.labels[60]]


def test_refreshing_only_affected_lists_equals_a_full_recomputation():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((200, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 200)
    ids = np.array([f"u{i:03d}" for i in range(200)], dtype=object)
    k = 4
    before = neighbour_arrays(x, labels, k)
    kth = {}
    for u, s in zip(before[0], before[3], strict=True):
        low, n = kth.get(ids[u], (np.inf, 0))
        kth[ids[u]] = (min(low, float(s)), n + 1)
    changed = np.zeros(200, dtype=bool)
    changed[[5, 17]] = True
    x2, labels2 = x.copy(), labels.copy()
    x2[5], labels2[17] = rng.standard_normal(6), (labels[17] + 1) % 3
    holders = np.isin(ids, [ids[u] for u, n in zip(before[0], before[1], strict=True) if changed[n]])
    mask = affected_users(ids, x2, labels2, changed, kth, k) | holders
    users = pa.table({"user_id": ids.tolist(), "cluster": labels2, "embedding": matrix_to_column(x2)})
    partial = neighbour_table("t", users, k, mask).to_pandas()
    old = neighbour_table("t", pa.table({"user_id": ids.tolist(), "cluster": labels,
                                          "embedding": matrix_to_column(x)}), k).to_pandas()  # fmt: skip
    merged = np.concatenate([old[~old["user_id"].isin(ids[mask])].to_numpy(), partial.to_numpy()])
    full = neighbour_table("t", users, k).to_pandas().to_numpy()
    key = lambda rows: sorted((r[1], r[3], r[2]) for r in rows)  # noqa: E731
    assert key(merged) == key(full) and mask.sum() < 200


def test_history_checks_read_only_the_rows_their_run_changed():
    from prag_models.config.settings import Settings
    from prag_models.stages.table_rules import changed_rows, neighbour_problems, one_cluster_problems
    from prag_models.users.neighbour_refresh import REFRESH_DDL, REFRESH_TABLE, UPDATES_TABLE

    con = duckdb.connect()
    users = [f"u{i}" for i in range(6)]
    con.execute("CREATE TABLE user_embeddings AS SELECT 'T' task, unnest($1) user_id", [users])
    con.execute("CREATE TABLE user_clusters AS SELECT 'T' task, unnest($1) user_id, unnest($2) cluster",
                [users[:5], [0, 0, 1, 1, 1]])  # fmt: skip  # u5: an embedding, no cluster
    con.execute("CREATE TABLE similar_users AS SELECT 'T' task, unnest($1) user_id, unnest($2) neighbour_id",
                [["u0", "u1", "u2", "u3"], ["u1", "u0", "u0", "u4"]])  # fmt: skip  # u2 -> u0 crosses clusters
    con.execute(f"CREATE TABLE {UPDATES_TABLE} AS SELECT 'T' task, 'r1' run_id, unnest(['u0', 'u3']) user_id")
    con.execute(REFRESH_DDL)
    con.execute(f"INSERT INTO {REFRESH_TABLE} SELECT 'T', 'r1', now()::TIMESTAMP, unnest(['u0', 'u1', 'u3'])")
    settings = Settings()
    assert one_cluster_problems(con, "T", settings, "r1") == []  # u5 was not part of run r1
    assert neighbour_problems(con, "T", settings, "r1") == []  # nor was u2's list
    assert one_cluster_problems(con, "T", settings) == ["1 users with an embedding but no cluster"]
    assert neighbour_problems(con, "T", settings) == ["1 neighbour pairs cross clusters or pair a user with itself"]
    con.execute(f"INSERT INTO {UPDATES_TABLE} VALUES ('T', 'r2', 'u5')")
    con.execute(f"INSERT INTO {REFRESH_TABLE} SELECT 'T', 'r2', now()::TIMESTAMP, 'u2'")
    assert one_cluster_problems(con, "T", settings, "r2") == ["1 users with an embedding but no cluster"]
    crossing = ["1 neighbour pairs cross clusters or pair a user with itself"]
    assert neighbour_problems(con, "T", settings, "r2") == crossing
    assert changed_rows(con, "T", "r1") == {"users_updated": 2, "lists_refreshed": 3}


def test_delta_write_equals_replacing_the_users_rows_and_keeps_unchanged_rows():
    from prag_models.users.row_writes import replace_user_rows, with_users, write_user_delta

    def table(con):
        rows = [("T", u, f"d{i}", i, f"h{u}{i}") for u in ("a", "b") for i in range(4)]
        con.execute("CREATE TABLE docs (task VARCHAR, user_id VARCHAR, doc_id VARCHAR, position BIGINT, "
                    "content_hash VARCHAR)")  # fmt: skip
        con.executemany("INSERT INTO docs VALUES (?, ?, ?, ?, ?)", rows)

    # a's update: d1 changed, a new d9 first (positions move), d3 kept
    new = pd.DataFrame({"task": "T", "user_id": "a", "doc_id": ["d9", "d0", "d1", "d2", "d3"],
                        "position": range(5), "content_hash": ["new", "ha0", "CHANGED", "ha2", "ha3"]})  # fmt: skip
    results = []
    for write in (replace_user_rows, write_user_delta):
        con = duckdb.connect()
        table(con)
        kept = con.execute("SELECT rowid FROM docs WHERE doc_id = 'd3' AND user_id = 'a'").fetchall()
        with_users(con, ["a"])
        write(con, "docs", new, "T")
        results.append(con.execute("SELECT * FROM docs ORDER BY user_id, position").fetchall())
        if write is write_user_delta:
            assert con.execute("SELECT rowid FROM docs WHERE doc_id = 'd3' AND user_id = 'a'").fetchall() == kept
    assert results[0] == results[1]


def test_the_embedding_cache_has_no_key_index_and_keeps_each_key_once(tmp_path):
    """A keyed cache of an older file loses its key (DuckDB rewrote the key index at every checkpoint: 9.8 s at
    3.7 M rows) with its rows kept; texts are embedded once, and a shard overlapping the cache adds only new keys."""
    from prag_models.text.embedding_cache import ensure_cache_table, insert_uncached_sql

    con = duckdb.connect(str(tmp_path / "c.duckdb"))
    con.execute("CREATE TABLE embedding_cache (model_id VARCHAR, content_hash VARCHAR, embedding FLOAT[], "
                "PRIMARY KEY (model_id, content_hash))")  # fmt: skip
    con.execute("INSERT INTO embedding_cache VALUES ('m', 'h0', [1.0, 0.0])")
    ensure_cache_table(con)
    keys = "SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'embedding_cache'"
    assert con.execute(keys).fetchone()[0] == 0
    assert con.execute("SELECT content_hash FROM embedding_cache").fetchall() == [("h0",)]
    calls: list[list[str]] = []

    def embed(texts):
        calls.append(list(texts))
        return np.ones((len(texts), 2), np.float32)

    source = "SELECT * FROM (VALUES ('h1', 'a'), ('h1', 'a'), ('h2', 'b')) t(content_hash, text)"
    assert embed_missing(con, embed, "m", source) == 2 and embed_missing(con, embed, "m", source) == 0
    assert calls == [["a", "b"]]
    shard = pa.table({"model_id": ["m", "m", "m"], "content_hash": ["h2", "h3", "h3"],
                      "embedding": pa.array([[0.0, 1.0]] * 3, pa.list_(pa.float32()))})  # fmt: skip
    con.register("_prag_shard", shard)
    assert con.execute(insert_uncached_sql("_prag_shard")).fetchone()[0] == 1
    counts = con.execute("SELECT content_hash, count(*) FROM embedding_cache GROUP BY 1 ORDER BY 1").fetchall()
    assert counts == [("h0", 1), ("h1", 1), ("h2", 1), ("h3", 1)]
