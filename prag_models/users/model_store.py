"""The fitted user clustering of each task, kept for incremental assignment (docs/methods.md §3.7).

One row per task in table ``cluster_models``: the pickled Clustering (HDBSCAN with prediction data, or k-means, and
the PCA projection it was fitted after) and its fit version, a digest of the users and labels it produced. Rows of
``user_clusters`` carry the fit version they were assigned by, so the incremental path uses the stored model only
while ``user_clusters`` still comes from it. The blob is written and read by prag itself, inside prag's own DuckDB
file; whoever can write that file can change every table already, so unpickling it adds no new trust.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence
from datetime import UTC, datetime

import duckdb
import numpy as np

from prag_models.storage.store import transaction
from prag_models.users.clustering import Clustering

MODELS_TABLE = "cluster_models"
MODELS_DDL = "task VARCHAR, fit_version VARCHAR, fitted_at TIMESTAMP, users BIGINT, dims BIGINT, model BLOB"


def fit_version(task: str, user_ids: Sequence[str], labels: np.ndarray) -> str:
    """Digest of a fit's users and labels (16 hex characters): the data version of the stored model."""
    h = hashlib.sha256(task.encode())
    for u, label in zip(user_ids, np.asarray(labels).tolist(), strict=True):
        h.update(f"\0{u}\0{label}".encode())
    return h.hexdigest()[:16]


def save_model(con: duckdb.DuckDBPyConnection, task: str, version: str, clustering: Clustering) -> None:
    """Replace the task's stored clustering (one transaction)."""
    blob = pickle.dumps(clustering, protocol=pickle.HIGHEST_PROTOCOL)
    dims = clustering.projection[1].shape[0] if clustering.projection is not None else None
    con.execute(f"CREATE TABLE IF NOT EXISTS {MODELS_TABLE} ({MODELS_DDL})")
    with transaction(con):
        con.execute(f"DELETE FROM {MODELS_TABLE} WHERE task = ?", [task])
        con.execute(
            f"INSERT INTO {MODELS_TABLE} VALUES (?, ?, ?, ?, ?, ?)",
            [task, version, datetime.now(UTC).replace(tzinfo=None), len(clustering.labels), dims, blob],
        )


def load_model(con: duckdb.DuckDBPyConnection, task: str) -> tuple[str, Clustering] | None:
    """The task's stored (fit version, clustering), or None when there is none."""
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = 'main'", [MODELS_TABLE]
    ).fetchall()[0][0]
    if not exists:
        return None
    rows = con.execute(f"SELECT fit_version, model FROM {MODELS_TABLE} WHERE task = ?", [task]).fetchall()
    if not rows:
        return None
    return rows[0][0], pickle.loads(rows[0][1])  # noqa: S301 - prag's own blob, see the module docstring


def current_model(con: duckdb.DuckDBPyConnection, task: str) -> tuple[str, Clustering] | None:
    """The stored clustering when every row of the task's user_clusters was assigned by it, else None."""
    stored = load_model(con, task)
    if stored is None:
        return None
    columns = {r[0] for r in con.execute("DESCRIBE user_clusters").fetchall()}
    if "fit_version" not in columns:
        return None
    versions = con.execute("SELECT DISTINCT fit_version FROM user_clusters WHERE task = ?", [task]).fetchall()
    return stored if versions == [(stored[0],)] else None
