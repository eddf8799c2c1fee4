"""The orderings the seed papers claim, next to what prag measured: one row per distinct comparison, raw and Holm.

    python benchmarks/seed_orderings.py [--home .prag] [--long]

Reads the DuckDB file of a finished `prag materialize` (read-only) and prints, per comparison and task, for the
LLM-free retrieval evaluation (every dev sample; primary metric NDCG@k on the demo) and for the LLM evaluation (the
task's primary metric on data.llm_eval_samples samples): the paired difference, its 95 % bootstrap interval, n, and
the verdict — holds, not shown (interval includes 0), not reversed (a "≥" claim whose interval includes 0: counted
apart from holds), reversed — raw and Holm-adjusted over the evaluation's family (two-sided paired t-test p-values,
statsmodels multipletests, family-wise 5 %), and (‖) whether the two methods' own intervals are disjoint. Claims with
identical per-sample differences (cfrag > dense and cfrag > user-only where dense = user-only) are one row listing
every claim; two methods identical on every sample are marked so. The tally states each family's size; its headline
counts are the Holm column. Claims: CFRAG > dense > random > zero-shot and every CFRAG ablation below CFRAG;
ClusterRAG hybrid ≥ collaborative ≥ user-only; PBR > base and > PBR w/o P-PRF; and prag's own: collaboration (3
neighbours, and the whole community) above user-only and random, trained CFRAG at least as good as its untrained
reranker, the best personalized method (cross-fitted: chosen on the other half of the samples) above dense_global.
Logic: prag_models/evaluation/claims.py; method: docs/methods.md §6.4.
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
    parser.add_argument("--long", action="store_true", help="one row per (distinct comparison, evaluation, task)")
    args = parser.parse_args()
    path = Path(args.home) / "prag.duckdb"
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run `prag materialize` (or scripts/demo.sh) first")
    con = duckdb.connect(str(path), read_only=True)
    try:
        table = claims_from_store(con)
    finally:
        con.close()
    if args.long and len(table):
        columns = ["evaluation", "task", "claims", "metric", "difference", "ci_low", "ci_high", "n_samples", "p_value",
                   "verdict", "p_holm", "holm_verdict", "family_size", "identical", "intervals_disjoint"]  # fmt: skip
        print(table[columns].to_markdown(index=False, floatfmt=".3g"))
    else:
        print(claims_markdown(table))


if __name__ == "__main__":
    main()
