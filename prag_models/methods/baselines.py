"""Non-collaborative retrieval baselines over the user's own profile: random, recency, BM25, dense."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prag_models.methods.profiles import ProfileIndex, Retrieved, top_by_cosine
from prag_models.methods.vector_index import CorpusIndex, knn_rows, merge_top_k


def retrieve_random(index: ProfileIndex, user_id: str, k: int, rng: np.random.Generator) -> list[Retrieved]:
    """k documents of the user's profile drawn uniformly without replacement (one per text)."""
    chosen = rng.permutation(index.visible_rows(user_id, [user_id]))
    return index.as_retrieved(chosen, np.zeros(len(chosen)), k)


def retrieve_recency(index: ProfileIndex, user_id: str, k: int) -> list[Retrieved]:
    """The user's k most recent documents, newest first (one per text)."""
    rows = index.visible_rows(user_id, [user_id])[::-1]
    return index.as_retrieved(rows, -np.arange(len(rows), dtype=np.float64), k)


def retrieve_dense(index: ProfileIndex, user_id: str, query_vector: np.ndarray, k: int) -> list[Retrieved]:
    """The user's k documents closest to the query embedding (cosine)."""
    return top_by_cosine(index, index.visible_rows(user_id, [user_id]), query_vector, k)


def retrieve_bm25(index: ProfileIndex, user_id: str, query: str, k: int) -> list[Retrieved]:
    """The user's k best documents by BM25 (bm25s, English stop words removed), one per text."""
    import bm25s

    rows = index.visible_rows(user_id, [user_id])
    if len(rows) == 0:
        return []
    corpus = [index.texts[r] for r in rows]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
    query_tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
    n = min(index.depth(k), len(rows))
    if not query_tokens.vocab:
        return index.as_retrieved(rows[:n], np.zeros(n), k)
    found, scores = retriever.retrieve(query_tokens, k=n, show_progress=False)
    return index.as_retrieved(rows[found[0]], scores[0], k)


def retrieve_dense_global(
    index: ProfileIndex,
    viewers: Sequence[str],
    query_vectors: np.ndarray,
    k: int,
    corpus: CorpusIndex | None = None,
) -> list[list[Retrieved]]:
    """Not personalized: the k documents closest to each query among all the viewer may see — its own and every
    shareable document of the others — one per text. One batched search over the shareable rows (``corpus``: exact
    when None, or an IVF index at scale), merged with an exact search of the viewer's own unshared rows."""
    scores, rows = visible_top(index, viewers, query_vectors, index.depth(k), corpus)
    return [index.as_retrieved(r[r >= 0], s[r >= 0], k) for s, r in zip(scores, rows, strict=True)]


def visible_top(
    index: ProfileIndex,
    viewers: Sequence[str],
    query_vectors: np.ndarray,
    depth: int,
    corpus: CorpusIndex | None = None,
    shared: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rows) of the ``depth`` rows closest to each query among those its viewer may see (rows -1 where fewer
    exist): one batched search over the ``shared`` rows (default: every shareable row; a subset of them, e.g. one row
    per text, narrows it), merged with an exact search of each viewer's own rows where it keeps some unshared."""
    queries = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
    corpus = corpus if corpus is not None else CorpusIndex(index.vectors)
    scores, rows = corpus.search(queries, depth, index.visible_mask(None) if shared is None else shared)
    by_viewer: dict[str, list[int]] = {}
    for i, viewer in enumerate(viewers):
        by_viewer.setdefault(viewer, []).append(i)
    for viewer, positions in by_viewer.items():
        if index.shares_all(viewer):  # every own row is already among the shareable ones
            continue
        own_s, own_r = knn_rows(index.vectors, index.visible_rows(viewer, [viewer]), queries[positions], depth)
        s, r = merge_top_k([scores[positions], own_s], [rows[positions], own_r], depth)
        scores, rows = _put(scores, positions, s), _put(rows, positions, r)
    return scores, rows


def _put(target: np.ndarray, positions: list[int], values: np.ndarray) -> np.ndarray:
    """target with the given rows replaced (widened, and padded with -1 / -inf, to fit the values)."""
    fill = -1 if target.dtype.kind == "i" else -np.inf
    if values.shape[1] > target.shape[1]:
        pad = np.full((len(target), values.shape[1] - target.shape[1]), fill, dtype=target.dtype)
        target = np.concatenate([target, pad], axis=1)
    target[positions] = fill
    target[positions, : values.shape[1]] = values
    return target


def retrieve_oracle_community(
    index: ProfileIndex, user_id: str, members: list[str], query_vector: np.ndarray, k: int
) -> list[Retrieved]:
    """Ceiling where the truth is known (demo): dense retrieval over the documents of the user's TRUE community."""
    return top_by_cosine(index, index.visible_rows(user_id, members), query_vector, k)
