"""Incremental ClusterRAG user updates (docs/methods.md §3.7): apply new profile documents to the changed users only.

A history document is *pending* while its latest version (by ``seq``) is not in ``profile_documents`` with the same
content hash, so applying is idempotent; a full run builds ``profile_documents`` from the LaMP files and the latest
history versions by the same merge (``data/history_documents.py``), which leaves nothing pending: what it included is
never applied twice. For the changed users only: new texts are embedded through the embedding cache,
z_u is recomputed by the rule of the full stage (``users/placement.py``: the mean of the user's shareable documents,
else its mean query embedding, §3.6; a user known only from documents others may not see gets no z_u, no cluster and
no neighbour list, docs/privacy.md), and a placed user is assigned to the current clustering without refitting it on
the new data: the clustering is re-fitted,
deterministically, on the reference it was fitted on (table ``cluster_state``: the embeddings and labels of the last
full clustering, a pickle-free representation of the model), then HDBSCAN ``approximate_predict`` (k-means: nearest
centroid) places the user and the refit labels are mapped to the stored cluster ids. When ``cluster_state`` is
missing or out of date (``user_clusters`` was re-materialized without it), the reference is the current
``user_embeddings`` + ``user_clusters`` and becomes the new ``cluster_state``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from prag_models.config.settings import ClusteringSettings
from prag_models.data.history import HISTORY_TABLE, has_table
from prag_models.data.history_documents import DOC_COLUMNS, LATEST_SQL, pending_sql
from prag_models.data.history_documents import merge_documents as merge_documents  # re-exported
from prag_models.storage.store import column_to_matrix, matrix_to_column, transaction
from prag_models.text.embedding_cache import embed_with_cache, lookup_embeddings
from prag_models.users.clustering import assign_new_users
from prag_models.users.model_store import current_model
from prag_models.users.neighbour_refresh import UPDATES_TABLE
from prag_models.users.neighbour_refresh import refresh_similar_users as refresh_similar_users  # re-exported
from prag_models.users.placement import assign_to_reference as assign_to_reference  # re-exported
from prag_models.users.placement import place_users, question_vectors
from prag_models.users.row_writes import DELTA_TABLES, replace_user_rows, with_users, write_user_delta

STATE_TABLE = "cluster_state"
BASE_TABLES = ("profile_documents", "document_embeddings", "user_embeddings", "user_clusters", "similar_users")
EMB_COLUMNS = ["task", "user_id", "doc_id", "position", "model_id", "content_hash", "embedding"]
STATE_COLUMNS = ["task", "user_id", "embedding", "fit_cluster", "cluster", "fitted_at"]
STATE_DDL = "task VARCHAR, user_id VARCHAR, embedding FLOAT[], fit_cluster BIGINT, cluster BIGINT, fitted_at TIMESTAMP"
UPDATES_DDL = (
    "task VARCHAR, run_id VARCHAR, updated_at TIMESTAMP, user_id VARCHAR, is_new BOOLEAN, n_new_docs BIGINT, "
    "n_docs BIGINT, cold_start BOOLEAN, old_cluster BIGINT, new_cluster BIGINT, reference VARCHAR, max_seq BIGINT, "
    "neighbours_refreshed BOOLEAN"
)

def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create cluster_state and incremental_updates if they do not exist."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} ({STATE_DDL})")
    con.execute(f"CREATE TABLE IF NOT EXISTS {UPDATES_TABLE} ({UPDATES_DDL})")


class NotMaterializedError(LookupError):
    """The task's user tables do not exist yet: materialize the graph before applying history."""


@dataclass
class UpdateReport:
    """What one incremental update of a task did."""

    task: str
    users: list[dict] = field(default_factory=list)  # rows written to incremental_updates
    newly_embedded: int = 0
    reference: str = "none"  # snapshot (cluster_state) | current (user_embeddings + user_clusters) | none
    reference_agreement: float | None = None  # share of reference users whose refit label maps to their own


def pending_history(con: duckdb.DuckDBPyConnection, task: str, since_seq: int = 0) -> pd.DataFrame:
    """Latest version of each history document of a task not yet in profile_documents (rows after since_seq)."""
    if not has_table(con, HISTORY_TABLE):
        return pd.DataFrame(columns=["seq", "user_id", "doc_id", "date", "text", "fields_json", "content_hash"])
    sql, params = f"WITH l AS ({LATEST_SQL}) SELECT * FROM l WHERE seq > ?", [task, since_seq]
    if has_table(con, "profile_documents"):
        sql += " AND " + pending_sql("(SELECT user_id, doc_id, content_hash FROM profile_documents WHERE task = ?)")
        params.append(task)
    return con.execute(sql + " ORDER BY seq", params).df()


def reference_clustering(con: duckdb.DuckDBPyConnection, task: str) -> tuple[str, pd.DataFrame]:
    """The clustering's reference: cluster_state when it agrees with user_clusters, else the current tables."""
    if has_table(con, STATE_TABLE):
        state = con.execute(f"SELECT * FROM {STATE_TABLE} WHERE task = ? ORDER BY user_id", [task]).df()
        stale = con.execute(
            f"SELECT count(*) FROM (SELECT user_id, cluster FROM user_clusters WHERE task = ?) u FULL OUTER JOIN "
            f"(SELECT user_id, cluster FROM {STATE_TABLE} WHERE task = ?) s ON u.user_id = s.user_id "
            "WHERE u.cluster IS DISTINCT FROM s.cluster",
            [task, task],
        ).fetchall()[0][0]
        if len(state) and not stale and state["embedding"].notna().any():
            return "snapshot", state
    current = con.execute(
        "SELECT u.task, u.user_id, u.embedding, c.cluster AS fit_cluster, c.cluster FROM user_embeddings u "
        "JOIN user_clusters c USING (task, user_id) WHERE task = ? ORDER BY user_id",
        [task],
    ).df()
    current["fitted_at"] = datetime.now(UTC).replace(tzinfo=None)
    return "current", current[STATE_COLUMNS]


def _check_ready(con: duckdb.DuckDBPyConnection, task: str, model_id: str) -> None:
    """Raise NotMaterializedError / ValueError when the task's tables cannot take an incremental update."""
    missing = [t for t in BASE_TABLES if not has_table(con, t)]
    if missing:
        raise NotMaterializedError(f"{task}: tables {missing} do not exist: materialize the graph first")
    if not con.execute("SELECT count(*) FROM user_clusters WHERE task = ?", [task]).fetchall()[0][0]:
        raise NotMaterializedError(f"{task}: no user clusters yet: materialize the graph for this task first")
    models = {
        m for (m,) in con.execute("SELECT DISTINCT model_id FROM document_embeddings WHERE task = ?", [task]).fetchall()
    }
    if models - {model_id}:
        raise ValueError(
            f"{task}: document_embeddings were computed with {sorted(models)}, the embedder is now {model_id!r}: "
            "re-materialize the graph (full) instead of an incremental update"
        )


def _user_documents(
    con: duckdb.DuckDBPyConnection, task: str, users: Sequence[str], pending: pd.DataFrame, model_id: str
) -> pd.DataFrame:
    """All documents of the changed users after the update, with their embeddings (users in _inc_users)."""
    existing = con.execute(
        "SELECT d.user_id, d.doc_id, d.date, d.text, d.fields_json, d.content_hash, e.embedding FROM "
        "profile_documents d LEFT JOIN (SELECT * FROM document_embeddings WHERE task = ? AND user_id IN "
        "(SELECT user_id FROM _inc_users)) e USING (task, user_id, doc_id) WHERE d.task = ? AND "
        "d.user_id IN (SELECT user_id FROM _inc_users) ORDER BY d.user_id, d.position",  # both sides: the changed users
        [task, task],
    ).df()
    gaps = existing["embedding"].isna()
    if gaps.any():  # an older document without a row in document_embeddings: take it from the cache
        found = lookup_embeddings(con, model_id, existing.loc[gaps, "content_hash"].tolist())
        existing.loc[gaps, "embedding"] = pd.Series(list(found), index=existing.index[gaps])
    parts = [merge_documents(existing[existing["user_id"] == u], pending[pending["user_id"] == u]) for u in users]
    return pd.concat([p.assign(user_id=u) for p, u in zip(parts, users, strict=True)], ignore_index=True)


def _next_state(state: pd.DataFrame, task: str, new_label: Mapping[str, int]) -> pd.DataFrame:
    """cluster_state with the changed users' current clusters (new users get a row without fit data)."""
    rows = state.assign(cluster=[new_label.get(u, c) for u, c in zip(state["user_id"], state["cluster"], strict=True)])
    rows = rows[STATE_COLUMNS].to_dict("records")
    known = set(state["user_id"])
    rows += [{"task": task, "user_id": u, "embedding": None, "fit_cluster": None, "cluster": label, "fitted_at": None}
             for u, label in new_label.items() if u not in known]  # fmt: skip
    return pd.DataFrame(rows, columns=STATE_COLUMNS)


def update_users(
    con: duckdb.DuckDBPyConnection,
    task: str,
    embed: Callable[[Sequence[str]], np.ndarray],
    model_id: str,
    clustering: ClusteringSettings,
    run_id: str = "",
    shaping: Callable[[Sequence[str], Sequence[str]], np.ndarray] | None = None,
) -> UpdateReport:
    """Apply the pending history of a task to its changed users; every write happens in one transaction.

    ``shaping(owners, doc ids)``: which documents may shape other users' results (``privacy.rules.sharing_rule``);
    z_u is their mean, as the full stage computes it, and a user placed by nothing gets no row in user_embeddings,
    user_clusters, cluster_state or similar_users (``users/placement.py``, docs/privacy.md)."""
    report = UpdateReport(task)
    pending = pending_history(con, task)
    if pending.empty:
        return report
    _check_ready(con, task, model_id)
    users = sorted(pending["user_id"].unique())
    vectors, _, report.newly_embedded = embed_with_cache(con, embed, model_id, pending["text"].tolist())
    pending = pending.assign(embedding=list(vectors))
    with_users(con, users)
    docs = _user_documents(con, task, users, pending, model_id).assign(task=task, model_id=model_id)
    sql = "SELECT user_id, cluster FROM user_clusters WHERE task = ? AND user_id IN (SELECT user_id FROM _inc_users)"
    old = dict(con.execute(sql, [task]).fetchall())
    doc_matrix = column_to_matrix(docs["embedding"].tolist(), dim=vectors.shape[1])
    doc_users = docs["user_id"].astype(str).tolist()
    doc_ids = docs["doc_id"].astype(str).tolist()
    keep = np.ones(len(docs), dtype=bool) if shaping is None else shaping(doc_users, doc_ids)
    place = place_users(users, doc_users, doc_matrix, keep, question_vectors(con, task))
    placed, user_vecs = place.users, place.vectors
    stored = current_model(con, task)
    state: pd.DataFrame | None = None
    labels = np.zeros(0, dtype=np.int64)
    if stored is not None:  # the fitted model with its prediction data: no refit, nothing read beyond these users
        report.reference, report.reference_agreement = "model", 1.0
        labels = assign_new_users(stored[1], user_vecs) if placed else labels
    else:
        report.reference, state = reference_clustering(con, task)
        state = state[~state["user_id"].isin(place.unplaced)]  # an unplaced user leaves the reference too
        fit = state[state["embedding"].notna()]
        sql = "SELECT coalesce(max(cluster), -1) + 1 FROM user_clusters WHERE task = ?"
        next_id = int(con.execute(sql, [task]).fetchall()[0][0])
        if placed:
            labels, report.reference_agreement = assign_to_reference(column_to_matrix(fit["embedding"].tolist()),
                                                                     fit["fit_cluster"].to_numpy(), user_vecs,
                                                                     clustering, next_id)  # fmt: skip
    new_label = dict(zip(placed, labels.tolist(), strict=True))
    if state is not None:
        state = _next_state(state, task, new_label)
    n_new = pending.groupby("user_id").size()
    max_seq = pending.groupby("user_id")["seq"].max()
    now = datetime.now(UTC).replace(tzinfo=None)
    zu = {u: (n, cold) for u, n, cold in zip(placed, place.counts, place.cold, strict=True)}
    report.users = [
        {"task": task, "run_id": run_id, "updated_at": now, "user_id": u, "is_new": u not in old,
         "n_new_docs": int(n_new[u]), "n_docs": zu.get(u, (0, False))[0], "cold_start": zu.get(u, (0, False))[1],
         "old_cluster": old.get(u), "new_cluster": new_label.get(u), "reference": report.reference,
         "max_seq": int(max_seq[u]), "neighbours_refreshed": False}
        for u in users
    ]  # fmt: skip
    user_rows = pa.table({"task": [task] * len(placed), "user_id": pa.array(placed, pa.string()),
                          "n_docs": pa.array(place.counts, pa.int64()), "cold_start": pa.array(place.cold, pa.bool_()),
                          "embedding": matrix_to_column(user_vecs)})  # fmt: skip
    cluster_rows = pd.DataFrame({"task": task, "user_id": pd.Series(placed, dtype=object),
                                 "cluster": pd.Series(labels, dtype="int64"), "algorithm": clustering.algorithm,
                                 "fit_version": stored[0] if stored else None})  # fmt: skip
    tables = {
        "profile_documents": docs[DOC_COLUMNS],
        "document_embeddings": docs[EMB_COLUMNS],
        "user_embeddings": user_rows,
        "user_clusters": cluster_rows,
    }
    _write(con, task, users, tables, state, pd.DataFrame(report.users))
    return report


_STATE_SYNC = (  # cluster_state follows user_clusters for the changed users only (new users: no fit data)
    f"DELETE FROM {STATE_TABLE} s WHERE s.task = ? AND s.user_id IN (SELECT user_id FROM _inc_users) AND NOT EXISTS "
    "(SELECT 1 FROM user_clusters c WHERE c.task = s.task AND c.user_id = s.user_id)",  # placed by nothing now
    f"UPDATE {STATE_TABLE} s SET cluster = c.cluster FROM user_clusters c WHERE s.task = ? AND c.task = s.task "
    "AND c.user_id = s.user_id AND s.user_id IN (SELECT user_id FROM _inc_users)",
    f"INSERT INTO {STATE_TABLE} (task, user_id, cluster) SELECT task, user_id, cluster FROM user_clusters c WHERE "
    "c.task = ? AND c.user_id IN (SELECT user_id FROM _inc_users) AND NOT EXISTS "
    f"(SELECT 1 FROM {STATE_TABLE} s WHERE s.task = c.task AND s.user_id = c.user_id)",
)


def _write(
    con: duckdb.DuckDBPyConnection,
    task: str,
    users: Sequence[str],
    tables: Mapping[str, pd.DataFrame | pa.Table],
    state: pd.DataFrame | None,
    log: pd.DataFrame,
) -> None:
    """Write the changed users' rows, cluster_state (whole when given, else the changed users' rows) and the update
    log in one transaction."""
    ensure_tables(con)
    with transaction(con):
        with_users(con, users)
        for table, frame in tables.items():
            (write_user_delta if table in DELTA_TABLES else replace_user_rows)(con, table, frame, task)
        # a user placed by nothing has no neighbour list (the lists holding it are refreshed: it is a changed user)
        con.execute("DELETE FROM similar_users WHERE task = ? AND user_id IN (SELECT user_id FROM _inc_users) AND "
                    "user_id NOT IN (SELECT user_id FROM user_clusters WHERE task = ?)", [task, task])  # fmt: skip
        if state is None:
            for sql in _STATE_SYNC:
                con.execute(sql, [task])
        else:
            con.execute(f"DELETE FROM {STATE_TABLE} WHERE task = ?", [task])
        writes = [("_inc_log", log, UPDATES_TABLE)]
        if state is not None:
            writes.append(("_inc_state", state, STATE_TABLE))
        for name, frame, table in writes:
            con.register(name, frame)
            cols = ", ".join(f'"{c}"' for c in frame.columns)
            con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {name}")
            con.unregister(name)


def clustering_drift(previous: Mapping[str, int], current: Mapping[str, int]) -> dict[str, float | int | None]:
    """Drift between two clusterings of the same users: adjusted Rand index and share of users that changed cluster.

    Cluster ids are arbitrary between fits, so "changed" is measured after the best one-to-one matching of the old
    and new ids (Hungarian assignment on the contingency table).
    """
    from scipy.optimize import linear_sum_assignment
    from sklearn.metrics import adjusted_rand_score

    common = sorted(set(previous) & set(current))
    out: dict[str, float | int | None] = {
        "users_compared": len(common),
        "new_users": len(set(current) - set(previous)),
        "removed_users": len(set(previous) - set(current)),
        "clusters_before": len(set(previous.values())),
        "clusters_after": len(set(current.values())),
        "changed_share": None,
        "adjusted_rand": None,
    }
    if not common:
        return out
    a = [previous[u] for u in common]
    b = [current[u] for u in common]
    table = pd.crosstab(pd.Series(a, name="before"), pd.Series(b, name="after")).to_numpy()
    rows, cols = linear_sum_assignment(-table)
    out["changed_share"] = round(1.0 - float(table[rows, cols].sum()) / len(common), 4)
    out["adjusted_rand"] = round(float(adjusted_rand_score(a, b)), 4)
    return out
