"""What per-task tuning buys on every demo family: tuned ClusterRAG and CFRAG vs their untuned ``@default`` (paired,
dev samples).

    python benchmarks/tuning.py --out /tmp/tuning [--users 64] [--dev 48] [--tasks LaMP-2]
        [--families communities,split_taste,no_community] [--budget 30]

Per family: one small demo world materialized up to clusterrag_retrievals, cfrag_retrievals and baseline_retrievals
(tuned_settings and cfrag_tuned_settings included: the knobs are chosen on the TRAIN samples; CFRAG trains with the
fake generator, whose feedback the probe mostly finds without headroom, so its registered models are mostly the
initialisations),
then scored by the LLM-free retrieval evaluation on the DEV
samples. Prints per family, task and tuned method the chosen values, the train scores (default → chosen) and the
paired dev difference tuned − @default and tuned − dense_global of the primary metric with its 95 % interval and n.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from user_similarity import materialize, world_parser, write_config  # noqa: E402

TUNED = ("clusterrag_collaborative", "clusterrag_community", "cfrag")


def run_family(out: Path, family: str, args: argparse.Namespace) -> list[str]:
    """Materialize one family's world and return its report lines."""
    import dagster as dg
    import duckdb

    from prag_models.stages.retrieval_evaluation import retrieval_evaluation_tables

    tasks = args.tasks.split(",")
    folder = out / family
    folder.mkdir(parents=True, exist_ok=True)
    config = write_config(folder / "prag.toml", {
        "data": {"demo_users": args.users, "demo_communities": 4, "demo_dev_samples": args.dev, "tasks": tasks,
                 "llm_eval_samples": 2, "demo_family": family},
        "generator": {"backend": "fake"},
        "tuning": {"budget_s": args.budget},
    })  # fmt: skip
    t0 = time.perf_counter()
    selection = dg.AssetSelection.assets("clusterrag_retrievals", "cfrag_retrievals", "baseline_retrievals")
    materialize(config, tasks, selection.upstream())
    lines = []
    with duckdb.connect(str(folder / "home" / "prag.duckdb"), read_only=True) as con:
        for task in tasks:
            scored, stats = retrieval_evaluation_tables(con, task, 3)
            _, _, comp = scored
            tuned = con.execute(
                "SELECT method, knob, value, default_score, score, n_trials, n_samples FROM tuned_settings "
                "WHERE task = ? UNION ALL SELECT method, knob, value, default_score, score, n_trials, n_samples "
                "FROM cfrag_tuned_settings WHERE task = ? ORDER BY method, knob", [task, task]
            ).fetchall()
            for method in TUNED:
                rows = [r for r in tuned if r[0] == method]
                chosen = ", ".join(f"{r[1].split('.')[-1]}={r[2]}" for r in rows)
                train = f"train {rows[0][3]:.3f} → {rows[0][4]:.3f} ({rows[0][5]} trials, n={rows[0][6]})"
                cells = []
                for base in (f"{method}@default", "dense_global"):
                    c = comp[(comp["method"] == method) & (comp["baseline"] == base)
                             & (comp["metric"] == stats["primary"])].iloc[0]  # fmt: skip
                    cells.append(f"vs {base}: {c.difference:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}] n={c.n_samples}")
                lines.append(f"| {family} | {task} | {method} | {chosen} | {train} | {stats['primary']} "
                             f"| {' | '.join(cells)} |")  # fmt: skip
    print(f"{family}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return lines


def main() -> None:
    """Run every family and print the table."""
    parser = world_parser(__doc__, users=64, dev=48, tasks="LaMP-2")
    parser.add_argument("--families", default="communities,split_taste,no_community")
    parser.add_argument("--budget", type=float, default=30.0)
    args = parser.parse_args()
    lines = ["| family | task | method | chosen | train (default → tuned) | metric | dev: tuned − @default "
             "| dev: tuned − dense_global |", "|---" * 8 + "|"]  # fmt: skip
    for family in args.families.split(","):
        lines += run_family(args.out, family, args)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
