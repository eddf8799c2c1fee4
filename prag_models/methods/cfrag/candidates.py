"""CFRAG candidates (docs/methods.md §2.3–2.5): user histories, the feedback samples, top-k documents per similar
user."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from prag_models.methods.profiles import ProfileIndex, Retrieved


def user_histories(user_ids: Sequence[str]) -> dict[str, list[int]]:
    """Each user's rows of a document table already in profile order (user, position) — the encoder's histories."""
    out: dict[str, list[int]] = {}
    for row, user in enumerate(user_ids):
        out.setdefault(user, []).append(row)
    return out


def select_feedback_samples(sample_ids: Sequence[str], cap: int, seed: int) -> list[str]:
    """The training samples that get feedback labels: all when cap <= 0, else a seeded choice of cap, sorted."""
    ids = sorted(sample_ids)
    if cap <= 0 or len(ids) <= cap:
        return ids
    chosen = np.random.default_rng(seed).choice(len(ids), size=cap, replace=False)
    return sorted(ids[int(i)] for i in chosen)


def per_user_top_k(
    index: ProfileIndex,
    viewer: str,
    users: Sequence[str],
    k: int,
    scores_of: Callable[[np.ndarray], np.ndarray],
) -> list[Retrieved]:
    """The top-k docs of each user in turn by ``scores_of(rows)`` (ties keep profile order; one per text): m·k
    candidates (§2.4); only the documents the viewer may see (docs/privacy.md)."""
    out: list[Retrieved] = []
    for user in dict.fromkeys(users):
        rows = index.visible_rows(viewer, [user])
        if len(rows) == 0:
            continue
        scores = np.asarray(scores_of(rows), dtype=np.float32)
        order = np.argsort(-scores, kind="stable")
        out += index.as_retrieved(rows[order], scores[order], k)
    return out


def cosine_scorer(index: ProfileIndex, query_vector: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Base dense relevance cos(q, d) of the given rows (unit vectors)."""
    q = np.asarray(query_vector, dtype=np.float32)
    return lambda rows: index.vectors[rows] @ q
