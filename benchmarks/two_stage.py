"""ClusterRAG two-stage retrieval against flat search at a large pool: documents scored, latency, recall of the flat
top-k.

    python benchmarks/two_stage.py [--docs 100000] [--queries 200] [--k 10]

The pool is synthetic but shaped like embedded text: unit vectors around 300 topic centres that group into 30 broader
areas (384-d; --noise sets how far documents spread around their topic), which is what document clusters exploit.
Both paths run in this process on the same vectors; flat is FAISS IndexFlatIP over the whole pool (the baseline).
The pool is clustered once (FAISS k-means, √N clusters past prag_models.methods.clusterrag.HDBSCAN_MAX_POOL) and
every query probes the top-B clusters (docs/methods.md §3.5).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from prag_models.methods import clusterrag
from prag_models.methods.profiles import ProfileIndex
from prag_models.methods.vector_index import flat_index, search


def synthetic_pool(n: int, noise: float, dim: int = 384, topics: int = 300, seed: int = 0) -> np.ndarray:
    """n unit vectors around `topics` centres that themselves group into 30 broader areas (overlapping topics)."""
    rng = np.random.default_rng(seed)
    areas = rng.standard_normal((30, dim))
    centres = (areas[rng.integers(0, 30, topics)] + 0.8 * rng.standard_normal((topics, dim))).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[rng.integers(0, topics, n)] + rng.normal(0, noise, (n, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def main() -> None:
    """Print build time, then per B: documents scored (share of the pool), ms per query, recall@k of flat."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--noise", type=float, default=0.1, help="per-dimension noise around a topic centre")
    args = parser.parse_args()
    x = synthetic_pool(args.docs + args.queries, args.noise)
    pool, queries = x[: args.docs], x[args.docs :]
    index = ProfileIndex([f"d{i}" for i in range(args.docs)], ["u"] * args.docs, [""] * args.docs, pool)
    rows = np.arange(args.docs)

    t = time.perf_counter()
    flat = flat_index(pool)
    flat_build = time.perf_counter() - t
    t = time.perf_counter()
    _, flat_top = search(pool, queries, args.k, flat)
    flat_ms = (time.perf_counter() - t) / args.queries * 1000
    t = time.perf_counter()
    one_by_one = [search(pool, q, args.k, flat)[1] for q in queries]
    flat_ms_single = (time.perf_counter() - t) / args.queries * 1000
    assert all((a[0] == b).all() for a, b in zip(one_by_one, flat_top, strict=True))

    t = time.perf_counter()
    clusters = clusterrag.cluster_documents(index, rows)
    build = time.perf_counter() - t
    print(f"pool: {args.docs} documents, {args.queries} queries, k = {args.k}, noise {args.noise}")
    print(f"flat: index built in {flat_build:.2f} s; {flat_ms_single:.2f} ms per query (one at a time), "
          f"{flat_ms:.3f} ms per query batched; scores {args.docs} documents")
    print(f"two-stage: {len(clusters.centroids)} clusters built once in {build:.1f} s (k-means, sizes "
          f"{clusters.sizes.min()}–{clusters.sizes.max()})\n")
    print("| B | documents scored | share of pool | ms per query | speed-up vs flat (one at a time) "
          "| recall@k of flat |")
    print("|---|---|---|---|---|---|")
    for b in (1, 2, 4, 8, 16):
        t = time.perf_counter()
        results = [clusterrag.retrieve_two_stage(index, clusters, q, args.k, b) for q in queries]
        ms = (time.perf_counter() - t) / args.queries * 1000
        scored = float(np.mean([s for _, s in results]))
        recall = float(np.mean([
            len({r.row for r in found} & set(top.tolist())) / args.k
            for (found, _), top in zip(results, flat_top, strict=True)
        ]))  # fmt: skip
        print(f"| {b} | {scored:.0f} | {scored / args.docs:.1%} | {ms:.2f} | {flat_ms_single / ms:.1f}× | "
              f"{recall:.3f} |")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS: {peak:.0f} MB")


if __name__ == "__main__":
    main()
