"""A moved or copied prag home reads its own MLflow artifacts (issue 50.5).

MLflow's sqlite store records every artifact location as an absolute URI: each experiment's, run's and logged model's
and each model version's source. A home moved to another folder would read the original folder's artifacts (or
nothing once that folder is gone), a copy its original's. :func:`relocate` rewrites the URIs under the store's former
artifact folders to the home's own. ``registry.make_client`` calls it once per process for a store under the home
(every prag command and Dagster run that uses MLflow), ``prag relocate`` on demand (``scripts/mlflow_ui.sh`` before the
UI starts).

A former folder is an experiment's ``file://`` artifact location with the name of the home's artifact folder
(``mlflow-artifacts``) in another place; locations elsewhere (MLflow's ``Default`` experiment under the directory it
was created from, a server's artifact store) are left alone. MLflow has no API to change an artifact location, so the
store is updated with sqlite3, in one transaction, and only the columns of :data:`URI_COLUMNS`.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from urllib.parse import unquote, urlparse

#: (table, column) of MLflow's sqlite store that hold artifact URIs.
URI_COLUMNS: tuple[tuple[str, str], ...] = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("logged_models", "artifact_location"),
    ("model_versions", "source"),
    ("model_versions", "storage_location"),
)


def former_folders(con: sqlite3.Connection, artifacts: Path) -> list[str]:
    """The ``file://`` artifact locations of the store's experiments that name a folder like ``artifacts`` elsewhere
    (the home's artifact folder before a move or copy)."""
    own = artifacts.resolve().as_uri()
    rows = con.execute("SELECT DISTINCT artifact_location FROM experiments WHERE artifact_location LIKE 'file://%'")
    found = []
    for (location,) in rows.fetchall():
        path = Path(unquote(urlparse(location).path))
        if location != own and path.name == artifacts.name:
            found.append(location)
    return sorted(found)


def relocate(db: Path, artifacts: Path) -> dict[str, int]:
    """Rewrite the artifact URIs of the sqlite store ``db`` under a former artifact folder to ``artifacts`` (the
    home's own, which must exist); former folder -> values rewritten ({} when there is nothing to rewrite)."""
    if not Path(db).is_file() or not artifacts.is_dir():
        return {}
    new = artifacts.resolve().as_uri()
    with closing(sqlite3.connect(db, timeout=30)) as con:
        try:
            olds = former_folders(con, artifacts)
        except sqlite3.OperationalError:  # no MLflow schema yet
            return {}
        if not olds:
            return {}
        columns = [(t, c) for t, c in URI_COLUMNS if c in {row[1] for row in con.execute(f"PRAGMA table_info({t})")}]
        rewritten = {}
        with con:  # one transaction: every location moves, or none
            for old in olds:
                count = 0
                for table, column in columns:
                    sql = (f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                           f"WHERE {column} = ? OR substr({column}, 1, ?) = ?")  # fmt: skip
                    count += con.execute(sql, [new, len(old) + 1, old, len(old) + 1, old + "/"]).rowcount
                rewritten[old] = count
    return rewritten


def home_note(rewritten: dict[str, int], artifacts: Path) -> str:
    """One line saying what :func:`relocate` did."""
    if not rewritten:
        return f"MLflow artifact locations: nothing to rewrite (none in a {artifacts.name} folder but {artifacts})"
    moved = "; ".join(f"{n} from {old}" for old, n in rewritten.items())
    return f"MLflow artifact locations rewritten to {artifacts.resolve().as_uri()}: {moved}"
