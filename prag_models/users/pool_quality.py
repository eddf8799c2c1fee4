"""How well found neighbours match who would label a query alike: pool precision and ARI against planted truth.

Pool precision of a user = the share of the documents its method may pool from other users (its neighbours' or its
cluster mates' documents) that were written by users of its planted community — on the demo, the users whose labels
the user's gold follows (docs/demo_data.md). Reported as the mean over users with a non-empty pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def neighbour_pool_precision(
    neighbours: Mapping[str, Sequence[str]], n_docs: Mapping[str, int], planted: Mapping[str, int]
) -> float | None:
    """Mean over users of the share of their neighbours' documents (self excluded) from their planted community."""
    shares = []
    for user, found in neighbours.items():
        if user not in planted:
            continue
        others = [v for v in found if v != user]
        total = sum(n_docs.get(v, 0) for v in others)
        if total:
            same = sum(n_docs.get(v, 0) for v in others if planted.get(v) == planted[user])
            shares.append(same / total)
    return round(float(np.mean(shares)), 4) if shares else None


def cluster_pool_precision(
    user_ids: Sequence[str], labels: Sequence[int], n_docs: Mapping[str, int], planted: Mapping[str, int]
) -> float | None:
    """Mean over users of the share of their cluster mates' documents from their planted community."""
    members: dict[int, list[str]] = {}
    for user, label in zip(user_ids, labels, strict=True):
        members.setdefault(int(label), []).append(user)
    mates = {u: members[int(label)] for u, label in zip(user_ids, labels, strict=True)}
    return neighbour_pool_precision(mates, n_docs, planted)


def adjusted_rand(user_ids: Sequence[str], labels: Sequence[int], planted: Mapping[str, int]) -> float | None:
    """Adjusted Rand index of the clusters against the planted communities (users without truth skipped)."""
    from sklearn.metrics import adjusted_rand_score

    known = [(planted[u], int(label)) for u, label in zip(user_ids, labels, strict=True) if u in planted]
    if len(known) < 2:
        return None
    truth, found = zip(*known, strict=True)
    return round(float(adjusted_rand_score(truth, found)), 4)


def planted_from_table(con, task: str) -> dict[str, int] | None:
    """The demo's planted community of each user (table planted_communities), None where the truth is unknown."""
    from prag_models.storage.store import table_exists

    if not table_exists(con, "planted_communities"):
        return None
    rows = con.execute("SELECT user_id, community FROM planted_communities WHERE task = ?", [task]).fetchall()
    return {u: int(c) for u, c in rows} or None


def documents_per_user(con, task: str) -> dict[str, int]:
    """Each user's number of profile documents in the task (document_embeddings)."""
    rows = con.execute("SELECT user_id, count(*) FROM document_embeddings WHERE task = ? GROUP BY 1", [task]).fetchall()
    return {u: int(n) for u, n in rows}
