"""What consent costs ClusterRAG on a demo world: each collaborative method's full-consent row (tuned), its untuned
``@default`` and its ``@consent<percent>`` row (docs/privacy.md "What consent costs"), with the paired dev difference
consent − full, the primary retrieval metric's 95 % interval and n.

    python benchmarks/consent_cost.py --out /tmp/consent [--users 144] [--communities 6] [--dev 96] [--seed 7]
        [--tasks LaMP-2] [--family communities] [--share 0.5] [--budget 30]

One demo world materialized up to clusterrag_retrievals and baseline_retrievals (tuned_settings included: the knobs
are chosen on the TRAIN samples; no CFRAG, no LLM), then scored by the LLM-free retrieval evaluation on the DEV
samples. The defaults are the default demo's world (144 users in 6 communities, 96 dev samples, seed 7).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from user_similarity import materialize, world_parser, write_config  # noqa: E402

METHODS = ("dense_global", "clusterrag_collaborative", "clusterrag_hybrid", "clusterrag_two_stage",
           "clusterrag_community")  # fmt: skip


def cell(summary, method: str, metric: str) -> str:  # noqa: ANN001
    """``value [low, high]`` of a method's metric (— when the row is missing)."""
    row = summary[(summary["method"] == method) & (summary["metric"] == metric)]
    return "—" if row.empty else "{:.3f} [{:.3f}, {:.3f}]".format(*row.iloc[0][["value", "ci_low", "ci_high"]])


def consent_lines(con, task: str, k: int) -> list[str]:  # noqa: ANN001
    """One row per collaborative method: full (tuned), @default, @consent, consent − full (paired) and n."""
    from prag_models.metrics.intervals import paired_difference
    from prag_models.stages.retrieval_evaluation import retrieval_evaluation_tables

    scored, stats = retrieval_evaluation_tables(con, task, k)
    scores, summary, _ = scored
    metric = stats["primary"]
    wide = scores[scores["metric"] == metric].pivot_table(index="sample_id", columns="method", values="value")
    suffix = next((m.partition("@")[2] for m in wide.columns if "@consent" in m), "")
    lines = []
    for method in METHODS:
        consent = f"{method}@{suffix}"
        if method not in wide or consent not in wide:
            continue
        both = wide[[consent, method]].dropna()
        d = paired_difference(both[consent].to_numpy(), both[method].to_numpy())
        lines.append(f"| {task} | {method} | {metric} | {cell(summary, method, metric)} "
                     f"| {cell(summary, method + '@default', metric)} | {cell(summary, consent, metric)} "
                     f"| {d.value:+.3f} [{d.low:+.3f}, {d.high:+.3f}] | {d.n} |")  # fmt: skip
    return lines


def main() -> None:
    """Materialize the world and print the table."""
    import dagster as dg
    import duckdb

    from prag_models.config.settings import load_settings

    parser = world_parser(__doc__, users=144, dev=96, tasks="LaMP-2")
    parser.add_argument("--communities", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--family", default="communities")
    parser.add_argument("--share", type=float, default=0.5, help="privacy.consent_cost_share")
    parser.add_argument("--budget", type=float, default=30.0, help="tuning.budget_s")
    args = parser.parse_args()
    tasks = args.tasks.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    config = write_config(args.out / "prag.toml", {
        "data": {"demo_users": args.users, "demo_communities": args.communities, "demo_dev_samples": args.dev,
                 "demo_seed": args.seed, "tasks": tasks, "llm_eval_samples": 2, "demo_family": args.family},
        "generator": {"backend": "fake"},
        "tuning": {"budget_s": args.budget},
        "privacy": {"consent_cost_share": args.share},
    })  # fmt: skip
    t0 = time.perf_counter()
    materialize(config, tasks, dg.AssetSelection.assets("clusterrag_retrievals", "baseline_retrievals").upstream())
    lines = ["| task | method | metric | full consent (tuned) | @default (untuned) | consent row | consent − full "
             "[95 %] | n |", "|---" * 8 + "|"]  # fmt: skip
    with duckdb.connect(str(args.out / "home" / "prag.duckdb"), read_only=True) as con:
        for task in tasks:
            lines += consent_lines(con, task, load_settings(config).retrieval.k)
    print(f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
