"""The orderings the seed papers claim, next to what prag measured, with paired 95 % intervals.

    python benchmarks/seed_orderings.py [--home .prag] [--long]

Reads the DuckDB file of a finished `prag materialize` (read-only) and prints, per claim and task, for the LLM-free
retrieval evaluation (every dev sample; primary metric NDCG@k on the demo) and for the LLM evaluation (the task's
primary metric on data.llm_eval_samples samples): the paired difference, its 95 % bootstrap interval, n, and whether
the claim holds, is not shown (interval includes 0) or is reversed, and (‖) whether the two methods' own intervals
are disjoint. Claims: CFRAG > dense > random > zero-shot and every CFRAG ablation below CFRAG; ClusterRAG hybrid ≥
collaborative ≥ user-only; PBR > base and > PBR w/o P-PRF; and prag's own: collaboration (3 neighbours, and the whole
community) above user-only and random, trained CFRAG at least as good as its untrained reranker, the best
personalized method (cross-fitted: chosen on the other half of the samples) above dense_global.
Logic: prag_models/evaluation/claims.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import duckdb

from prag_models.evaluation.claims import claims_from_store, claims_markdown


def main() -> None:
    """Print the claims table of the DuckDB file under --home."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=str(Path(__file__).resolve().parent.parent / ".prag"))
    parser.add_argument("--long", action="store_true", help="one row per (claim, evaluation, task)")
    args = parser.parse_args()
    path = Path(args.home) / "prag.duckdb"
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run `prag materialize` (or scripts/demo.sh) first")
    con = duckdb.connect(str(path), read_only=True)
    try:
        table = claims_from_store(con)
    finally:
        con.close()
    if args.long:
        print(table.to_markdown(index=False, floatfmt=".3f"))
    else:
        print(claims_markdown(table))


if __name__ == "__main__":
    main()
