"""Reads shared by the retrieval methods: a task's profile index (documents with their embeddings) and its users'
embeddings with their clusters, from the DuckDB tables the embeddings and users stages write."""

from __future__ import annotations

import pandas as pd

from prag_models.methods.profiles import ProfileIndex
from prag_models.privacy import shareable_flags
from prag_models.store import column_to_matrix


def profile_index(con, task: str, *, default_share: bool) -> tuple[ProfileIndex, pd.DataFrame]:
    """The task's profile documents as an index (profile order, with the sharing flags of docs/privacy.md) and their
    rows (with fields_json)."""

    docs = con.execute(
        "SELECT p.doc_id, p.user_id, p.text, p.fields_json, e.embedding FROM profile_documents p "
        "JOIN document_embeddings e USING (task, user_id, doc_id) WHERE task = ? ORDER BY p.user_id, p.position",
        [task],
    ).df()
    vectors = column_to_matrix(docs["embedding"].tolist())
    users, ids = docs["user_id"].tolist(), docs["doc_id"].tolist()
    shareable = shareable_flags(con, task, users, ids, default_share)
    return ProfileIndex(ids, users, docs["text"].tolist(), vectors, shareable), docs


def clustered_users(con, task: str) -> pd.DataFrame:
    """user_id, embedding (z_u) and cluster of every clustered user of the task, by user id."""
    return con.execute(
        "SELECT e.user_id, e.embedding, c.cluster FROM user_embeddings e JOIN user_clusters c "
        "USING (task, user_id) WHERE task = ? ORDER BY e.user_id",
        [task],
    ).df()
