"""Inner-product search over unit vectors with FAISS (cosine similarity of normalised embeddings).

``knn_rows`` is exact over any subset of a task's rows, a block of rows at a time (memory: one block, never a copy of
the subset); ``CorpusIndex`` searches a whole task under a visibility mask — exact up to ``ann_above`` rows, else an
IVF index (8-bit scalar-quantised lists, the candidates re-scored exactly) whose recall against exact search is
measured on a sample of the queries by ``recall_at_k``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

#: Rows gathered at once by the exact search (memory: BLOCK_ROWS × d floats).
BLOCK_ROWS = 65_536
#: (query, candidate) pairs re-scored at once after an IVF search (memory: RESCORE_PAIRS × d floats, about 38 MB at
#: d = 384), so a deeper search (a ranking cut 10 × k deep to keep k distinct texts) re-scores fewer queries at once.
RESCORE_PAIRS = 24_576
#: Up to this many (query, row) pairs the exact search is one NumPy product.
SMALL = 1 << 20


@contextmanager
def numpy_blas_threads(n: int = 1) -> Iterator[None]:
    """NumPy's and SciPy's BLAS limited to n threads, FAISS's own left as it is: per-user loops of small products
    (a profile, a pool, HDBSCAN's distances) stop waiting for spinning BLAS threads, which on a busy 2-core machine
    made them up to 10x slower (benchmarks/scale.py)."""
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()
    blas = controller.select(user_api="blas").lib_controllers
    paths = [lib.filepath for lib in blas if "faiss" not in lib.filepath]
    if not paths:
        yield
        return
    with controller.select(filepath=paths).limit(limits=n):
        yield


def flat_index(vectors: np.ndarray):  # noqa: ANN201 - faiss.IndexFlatIP, imported lazily
    """A FAISS IndexFlatIP holding the given (n, d) float32 vectors."""
    import faiss

    x = np.ascontiguousarray(vectors, dtype=np.float32)
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    return index


def search(vectors: np.ndarray, queries: np.ndarray, k: int, index=None) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """(scores, rows) of the top-k vectors per query, each (n_queries, k); rows are -1 where fewer exist."""
    q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    if len(vectors) == 0 or len(q) == 0:
        return np.zeros((len(q), 0), dtype=np.float32), np.zeros((len(q), 0), dtype=np.int64)
    index = index if index is not None else flat_index(vectors)
    scores, rows = index.search(q, min(k, len(vectors)))
    return scores, rows.astype(np.int64)


def merge_top_k(
    scores: list[np.ndarray], rows: list[np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the k best of several candidate lists (row -1 = none; a row found twice counts once), best first,
    equal scores by row."""
    s = np.concatenate([np.asarray(x, dtype=np.float32) for x in scores], axis=1)
    r = np.concatenate([np.asarray(x, dtype=np.int64) for x in rows], axis=1)
    s = np.where(r < 0, -np.inf, s)
    order = np.lexsort((r, -s), axis=-1)
    s, r = np.take_along_axis(s, order, -1), np.take_along_axis(r, order, -1)
    dup = np.zeros_like(r, dtype=bool)
    dup[:, 1:] = (r[:, 1:] == r[:, :-1]) & (r[:, 1:] >= 0)
    if dup.any():
        s, r = np.where(dup, -np.inf, s), np.where(dup, -1, r)
        order = np.lexsort((np.where(r < 0, np.iinfo(np.int64).max, r), -s), axis=-1)
        s, r = np.take_along_axis(s, order, -1), np.take_along_axis(r, order, -1)
    return s[:, :k], np.where(np.isinf(s[:, :k]), -1, r[:, :k])


def knn_rows(
    vectors: np.ndarray, rows: np.ndarray, queries: np.ndarray, k: int, block: int = BLOCK_ROWS
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner product of every query among the given rows of ``vectors``: (scores, rows), each
    (n_queries, min(k, len(rows))), best first (rows -1 where fewer exist)."""
    import faiss

    q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    rows = np.asarray(rows, dtype=np.int64)
    kk = min(k, len(rows))
    best_s, best_r = np.zeros((len(q), 0), dtype=np.float32), np.zeros((len(q), 0), dtype=np.int64)
    if kk == 0 or len(q) == 0:
        return best_s, best_r
    if len(rows) * len(q) <= SMALL:  # a user's profile: one product, no FAISS call
        s = q @ vectors[rows].T
        order = np.argsort(-s, axis=1, kind="stable")[:, :kk]
        return np.take_along_axis(s, order, 1), rows[order]
    for start in range(0, len(rows), block):
        part = rows[start : start + block]
        s, i = faiss.knn(q, np.ascontiguousarray(vectors[part]), min(kk, len(part)), metric=faiss.METRIC_INNER_PRODUCT)
        best_s, best_r = merge_top_k([best_s, s], [best_r, np.where(i >= 0, part[np.maximum(i, 0)], -1)], kk)
    return best_s, best_r


@dataclass(eq=False)
class CorpusIndex:
    """Search over every row of a task under a row mask (who may see what, ``ProfileIndex.visible_mask``): exact
    in blocks up to ``ann_above`` shareable rows; above, an IVF index over all rows (√n lists of the n shareable rows,
    trained on them alone, 8-bit scalar quantiser) probed ``nprobe`` lists per query through a bitmap selector, its
    ``rescore`` × k candidates re-scored exactly."""

    vectors: np.ndarray
    ivf: object | None = None
    nprobe: int = 0
    rescore: int = 4
    build_seconds: float = 0.0
    quantizer: object | None = None  # the IVF index points to it: kept alive with it

    @classmethod
    def build(
        cls, vectors: np.ndarray, ann_above: int, nprobe: int, seed: int = 0, shareable: np.ndarray | None = None
    ) -> CorpusIndex:
        """Exact search for a corpus of up to ann_above shareable rows; otherwise train the IVF index on them and fill
        it block by block with every row. ``shareable`` (``ProfileIndex.shareable``; None: every row): only those
        rows decide the search every user gets — exact or IVF, the number of lists, their centroids and the scalar
        quantiser (``privacy.shareable.shared_rows``); a private row is only listed, for its owner's own searches."""
        from prag_models.privacy.shareable import shared_rows

        shared = shared_rows(shareable, len(vectors))
        if len(shared) <= ann_above:
            return cls(vectors)
        import faiss

        t0 = time.perf_counter()
        n, d = vectors.shape
        nlist = int(np.sqrt(len(shared)))
        quantizer = faiss.IndexFlatIP(d)
        ivf = faiss.IndexIVFScalarQuantizer(quantizer, d, nlist, faiss.ScalarQuantizer.QT_8bit,
                                            faiss.METRIC_INNER_PRODUCT)  # fmt: skip
        pick = np.random.default_rng(seed).choice(len(shared), size=min(len(shared), 40 * nlist), replace=False)
        ivf.train(np.ascontiguousarray(vectors[shared[np.sort(pick)]]))
        for start in range(0, n, BLOCK_ROWS):
            ivf.add(np.ascontiguousarray(vectors[start : start + BLOCK_ROWS]))
        return cls(vectors, ivf, min(nprobe, nlist), build_seconds=time.perf_counter() - t0, quantizer=quantizer)

    @property
    def kind(self) -> str:
        """``flat`` or ``ivf<lists>,sq8,nprobe<p>``."""
        return "flat" if self.ivf is None else f"ivf{self.ivf.nlist},sq8,nprobe{self.nprobe}"  # type: ignore[attr-defined]

    def search(self, queries: np.ndarray, k: int, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of the top-k rows where mask is True, per query (rows -1 where fewer exist)."""
        q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if self.ivf is None:
            return knn_rows(self.vectors, np.flatnonzero(mask), q, k)
        import faiss

        bitmap = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
        selector = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bitmap))
        params = faiss.SearchParametersIVF(sel=selector, nprobe=self.nprobe)
        _, cand = self.ivf.search(q, self.rescore * k, params=params)  # type: ignore[attr-defined]
        out_s, out_r = [], []
        block = max(1, RESCORE_PAIRS // max(1, cand.shape[1]))
        for start in range(0, len(q), block):
            c = cand[start : start + block]
            s = np.einsum("qcd,qd->qc", self.vectors[np.maximum(c, 0)], q[start : start + block])
            s, r = merge_top_k([s], [c], k)
            out_s.append(s)
            out_r.append(r)
        return np.concatenate(out_s), np.concatenate(out_r)

    def recall_at_k(self, queries: np.ndarray, k: int, mask: np.ndarray, sample: int, seed: int = 0) -> float | None:
        """Share of the exact top-k (over the mask) that the index returns, on a seeded sample of the queries (None
        for exact search)."""
        if self.ivf is None or sample <= 0 or len(queries) == 0:
            return None
        pick = np.sort(np.random.default_rng(seed).choice(len(queries), min(sample, len(queries)), replace=False))
        _, exact = knn_rows(self.vectors, np.flatnonzero(mask), queries[pick], k)
        _, found = self.search(queries[pick], k, mask)
        hits = sum(len(set(a[a >= 0]) & set(b[b >= 0])) for a, b in zip(exact, found, strict=True))
        return round(hits / max(1, int((exact >= 0).sum())), 4)
