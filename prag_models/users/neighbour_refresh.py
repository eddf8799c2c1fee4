"""Similar-user lists after an incremental update (docs/methods.md §3.3, §3.7), refreshed only where they can change.

A user's top-k list changes only if it holds a changed user, the user itself changed, or a changed user's new vector
now beats the k-th entry of a member of the cluster it joined (or that member has fewer than k neighbours). Those
users' lists are recomputed against their whole cluster; every other list is provably what a full recomputation
would give, and is left as it is.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prag_models.storage.store import column_to_matrix, transaction
from prag_models.users.embeddings import normalize_rows
from prag_models.users.similar import clustered_user_vectors, neighbour_table

UPDATES_TABLE = "incremental_updates"
#: The users whose lists an incremental run refreshed (what its neighbour check reads).
REFRESH_TABLE = "neighbour_refreshes"
REFRESH_DDL = f"CREATE TABLE IF NOT EXISTS {REFRESH_TABLE} (task VARCHAR, run_id VARCHAR, refreshed_at TIMESTAMP, " \
    "user_id VARCHAR)"  # fmt: skip


def _in(con: duckdb.DuckDBPyConnection, name: str, column: str, values: pa.Array) -> None:
    """Register values as a one-column view for IN filters."""
    con.register(name, pa.table({column: values}))


def affected_users(
    ids: np.ndarray,
    vectors: np.ndarray,
    labels: np.ndarray,
    changed: np.ndarray,
    kth: dict[str, tuple[float, int]],
    k: int,
) -> np.ndarray:
    """Mask of the members whose list may change: changed users and members a changed user now enters the top-k of
    (kth: user → (k-th similarity, list length) before the update)."""
    x = normalize_rows(vectors)
    hit = changed.copy()
    floor = np.array([kth.get(u, (-np.inf, 0))[0] for u in ids])
    short = np.array([kth.get(u, (0.0, 0))[1] < k for u in ids])
    for row in np.flatnonzero(changed):
        same = labels == labels[row]
        sims = x @ x[row]
        hit |= same & (short | (sims >= floor))
    return hit


def refresh_similar_users(con: duckdb.DuckDBPyConnection, task: str, k: int, run_id: str = "") -> dict[str, int]:
    """Recompute the neighbour lists that the pending updates can change (see the module docstring); the refreshed
    users are recorded under the run id (table neighbour_refreshes)."""
    if not con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = 'main'", [UPDATES_TABLE]
    ).fetchall()[0][0]:
        return {"clusters": 0, "users": 0, "pairs": 0}
    sql = f"SELECT user_id, old_cluster, new_cluster FROM {UPDATES_TABLE} WHERE task = ? AND NOT neighbours_refreshed"
    todo = con.sql(sql, params=[task]).to_arrow_table()
    if not todo.num_rows:
        return {"clusters": 0, "users": 0, "pairs": 0}
    changed_ids = pc.unique(todo["user_id"])
    _in(con, "_inc_changed", "user_id", changed_ids)
    try:
        holders = con.sql(
            "SELECT DISTINCT user_id FROM similar_users WHERE task = ? AND neighbour_id IN (FROM _inc_changed)",
            params=[task],
        ).to_arrow_table()["user_id"]
        clusters = con.sql(
            "SELECT DISTINCT cluster FROM user_clusters WHERE task = ? AND (user_id IN (FROM _inc_changed) "
            "OR user_id IN (SELECT user_id FROM similar_users WHERE task = ? AND neighbour_id IN (FROM _inc_changed)))",
            params=[task, task],
        ).to_arrow_table()["cluster"]
    finally:
        con.unregister("_inc_changed")
    members = clustered_user_vectors(con, task, clusters.combine_chunks())
    ids = np.asarray(members["user_id"].to_pylist(), dtype=object)
    _in(con, "_inc_members", "user_id", members["user_id"])
    try:
        kth = {u: (s, n) for u, s, n in con.execute(
            "SELECT user_id, min(similarity), count(*) FROM similar_users WHERE task = ? AND user_id IN "
            "(FROM _inc_members) GROUP BY user_id", [task]).fetchall()}  # fmt: skip
    finally:
        con.unregister("_inc_members")
    changed = np.isin(ids, changed_ids.to_pylist()) | np.isin(ids, holders.to_pylist())
    vectors, labels = column_to_matrix(members["embedding"]), members["cluster"].to_numpy()
    mask = affected_users(ids, vectors, labels, np.isin(ids, changed_ids.to_pylist()), kth, k) | changed
    frame = neighbour_table(task, members, k, mask)
    refreshed = pa.array(ids[mask].tolist(), pa.string())
    try:
        with transaction(con):
            _in(con, "_inc_refreshed", "user_id", refreshed)
            con.execute("DELETE FROM similar_users WHERE task = ? AND user_id IN (FROM _inc_refreshed)", [task])
            con.register("_inc_rows", frame)
            con.execute("INSERT INTO similar_users (task, user_id, neighbour_id, rank, similarity) "
                        "SELECT * FROM _inc_rows")
            con.execute(f"UPDATE {UPDATES_TABLE} SET neighbours_refreshed = true WHERE task = ?", [task])
            con.execute(REFRESH_DDL)
            con.execute(f"INSERT INTO {REFRESH_TABLE} SELECT ?, ?, now()::TIMESTAMP, user_id FROM _inc_refreshed",
                        [task, run_id])  # fmt: skip
    finally:
        con.unregister("_inc_refreshed")
        con.unregister("_inc_rows")
    return {"clusters": len(clusters), "users": len(refreshed), "pairs": frame.num_rows}
