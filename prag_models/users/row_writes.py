"""How an incremental update writes the changed users' rows (prag_models.users.incremental), inside its transaction."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pandas as pd

from prag_models.storage.schema import column_types, migrate_columns


def with_users(con: duckdb.DuckDBPyConnection, users: Sequence[str]) -> None:
    """Register the user list as view _inc_users (for IN filters)."""
    con.register("_inc_users", pd.DataFrame({"user_id": list(users)}, dtype=object))


#: Tables whose changed users' documents are written as a delta: a delete of a row makes DuckDB rewrite its whole
#: row group at the next checkpoint (7-8 s for 1 % of the users of a 370,000-document task, growing with the task),
#: so unchanged rows are kept, moved rows get their new position, and only new or changed rows are written.
DELTA_TABLES = ("profile_documents", "document_embeddings")


def write_user_delta(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame, task: str) -> None:
    """Make the task's rows of the users in _inc_users equal to frame (key: user_id, doc_id), touching only the rows
    that differ (inside the caller's transaction)."""
    con.register("_inc_rows", frame)
    try:
        incoming = column_types(con, "_inc_rows")
        migrate_columns(con, table, incoming)
        same = " AND ".join(f'r."{c}" IS NOT DISTINCT FROM t."{c}"' for c in incoming
                            if c not in ("task", "user_id", "doc_id", "position", "embedding"))  # fmt: skip
        match = "r.user_id = t.user_id AND r.doc_id = t.doc_id"
        con.execute(
            f"DELETE FROM {table} t WHERE t.task = ? AND t.user_id IN (SELECT user_id FROM _inc_users) AND NOT EXISTS "
            f"(SELECT 1 FROM _inc_rows r WHERE {match} AND {same or 'true'})",
            [task],
        )
        if "position" in incoming:
            con.execute(
                f"UPDATE {table} t SET position = r.position FROM _inc_rows r WHERE t.task = ? AND {match} "
                "AND t.position IS DISTINCT FROM r.position",
                [task],
            )
        cols = ", ".join(f'"{c}"' for c in incoming)
        con.execute(
            f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _inc_rows r WHERE NOT EXISTS (SELECT 1 FROM {table} t "
            f"WHERE t.task = ? AND {match})",
            [task],
        )
    finally:
        con.unregister("_inc_rows")


def replace_user_rows(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame, task: str) -> None:
    """Delete the task's rows of the users in _inc_users and insert frame (inside the caller's transaction)."""
    con.execute(f"DELETE FROM {table} WHERE task = ? AND user_id IN (SELECT user_id FROM _inc_users)", [task])
    con.register("_inc_rows", frame)
    incoming = column_types(con, "_inc_rows")
    migrate_columns(con, table, incoming)
    cols = ", ".join(f'"{c}"' for c in incoming)
    con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _inc_rows")
    con.unregister("_inc_rows")
