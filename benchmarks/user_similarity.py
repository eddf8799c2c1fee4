"""Content vs taste vs blend user similarity on every demo family, scored by the LLM-free retrieval evaluation.

    python benchmarks/user_similarity.py --out /tmp/usersim [--users 64] [--dev 32] [--tasks LaMP-2,LaMP-4]
        [--families communities,split_taste,no_community] [--modes taste,blend]

Per family: one small demo world materialized up to ``lamp_retrieval_evaluation`` with the fake generator and
``clustering.user_similarity = content``; then, per other mode, only the assets the similarity decides
(user_clusters, similar_users, cfrag_similar_users, clusterrag_retrievals, cfrag_retrievals) are materialized again in
the same home (CFRAG's models stay those trained with content neighbours: only its user retrieval changes). Prints,
per family and method, label-hit@3 and NDCG@3 per mode with 95 % intervals (samples of all tasks pooled) and the
paired difference of each mode against content, and the pool precision / ARI the users assets record. Small CFRAG
training budgets keep a family under a few minutes on shared cores.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

METHODS = ("dense", "dense_global", "oracle_community", "clusterrag_community", "clusterrag_collaborative", "cfrag")
METRICS = ("label_hit@3", "ndcg@3")
RERUN = ("user_clusters", "similar_users", "cfrag_similar_users", "clusterrag_retrievals", "cfrag_retrievals")


def write_config(path: Path, sections: dict[str, dict]) -> Path:
    """A prag.toml with the given sections (home = the config's folder / home)."""
    import tomli_w

    path.write_text(tomli_w.dumps({"home": str(path.parent / "home"), **sections}), encoding="utf-8")
    return path


def world_parser(description: str, users: int, dev: int, tasks: str) -> argparse.ArgumentParser:
    """A demo-world benchmark's command line with the shared options: --out (folder), --users, --dev and --tasks."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--users", type=int, default=users)
    parser.add_argument("--dev", type=int, default=dev)
    parser.add_argument("--tasks", default=tasks)
    return parser


def materialize(config: Path, tasks: list[str], selection) -> None:
    """Materialize a selection for the tasks in-process (raises on a failed step)."""
    import dagster as dg

    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources

    dg.materialize(
        list(defs.assets) + list(defs.asset_checks),
        resources=default_resources(config_file=str(config)),
        selection=selection,
        tags={"dagster/asset_partition_range_start": tasks[0], "dagster/asset_partition_range_end": tasks[-1]},
    )


def scores(home: Path, tasks: list[str]) -> pd.DataFrame:
    """Per-sample retrieval scores of every task (task-prefixed sample ids)."""
    import duckdb

    from prag_models.stages.retrieval_evaluation import retrieval_evaluation_tables

    con = duckdb.connect(str(home / "prag.duckdb"), read_only=True)
    try:
        frames = []
        for task in tasks:
            scored, _ = retrieval_evaluation_tables(con, task, 3)
            if scored is not None:
                frames.append(scored[0].assign(sample_id=lambda f, t=task: t + ":" + f["sample_id"].astype(str)))
        return pd.concat(frames, ignore_index=True)
    finally:
        con.close()


def stage_quality(home: Path, config: Path, tasks: list[str]) -> dict[str, dict]:
    """Pool precision and ARI per task, recomputed in-process by the stages (the same numbers the assets record)."""
    import duckdb

    from prag_models.config.settings import load_settings
    from prag_models.methods.cfrag.tables import cfrag_similar_user_rows
    from prag_models.stages.users import similar_user_rows, user_cluster_rows

    settings = load_settings(config)
    con = duckdb.connect(str(home / "prag.duckdb"))
    out = {}
    try:
        for task in tasks:
            _, clusters = user_cluster_rows(con, task, settings)
            _, similar = similar_user_rows(con, task, settings)
            _, cfrag = cfrag_similar_user_rows(con, task, settings)
            out[task] = {"ari": clusters.get("adjusted_rand_vs_planted"),
                         "cluster_pp": clusters.get("cluster_pool_precision"),
                         "neighbour_pp": similar.get("neighbour_pool_precision"),
                         "cfrag_pp": cfrag.get("pool_precision")}  # fmt: skip
    finally:
        con.close()
    return out


def run_family(out: Path, family: str, args: argparse.Namespace) -> tuple[pd.DataFrame, dict]:
    """Materialize one family with content, then the similarity-dependent assets per mode; scores and quality."""
    import dagster as dg

    tasks = args.tasks.split(",")
    root = out / family
    root.mkdir(parents=True, exist_ok=True)
    base = {
        "data": {"demo_users": args.users, "demo_communities": 4, "demo_dev_samples": args.dev, "tasks": tasks,
                 "llm_eval_samples": 4, "demo_family": family},
        "generator": {"backend": "fake", "max_new_tokens": 16, "threads": 1},
        "retrieval": {"k": 3},
        "clustering": {"similar_users": 3, "user_similarity": "content"},
        "cfrag": {"epochs": 5, "train_epochs": 5, "max_feedback_samples": 8},
    }  # fmt: skip
    frames, quality = [], {}
    for mode in ("content", *args.modes.split(",")):
        sections = json.loads(json.dumps(base))
        sections["clustering"] |= {"user_similarity": mode, "taste_weight": args.weight}
        config = write_config(root / f"prag_{mode}.toml", sections)
        t0 = time.time()
        selection = (
            dg.AssetSelection.assets("lamp_retrieval_evaluation").upstream()
            if mode == "content"
            else dg.AssetSelection.assets(*RERUN)
        )
        materialize(config, tasks, selection)
        print(f"{family} {mode}: {time.time() - t0:.0f} s", flush=True)
        frames.append(scores(root / "home", tasks).assign(mode=mode))
        quality[mode] = stage_quality(root / "home", config, tasks)
    return pd.concat(frames, ignore_index=True).assign(family=family), quality


def report(table: pd.DataFrame, quality: dict) -> str:
    """Markdown: per family and method, each mode's value and its paired difference against content."""
    from prag_models.metrics.intervals import estimate, paired_difference

    lines = ["| family | method | metric | content | taste | blend | taste − content | blend − content |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for (family, method, metric), part in table.groupby(["family", "method", "metric"], sort=True):
        if method not in METHODS or metric not in METRICS:
            continue
        wide = part.pivot_table(index="sample_id", columns="mode", values="value", aggfunc="first")
        cells = []
        for mode in ("content", "taste", "blend"):
            e = estimate(wide[mode].to_numpy()) if mode in wide else None
            cells.append(f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}]" if e else "–")
        for mode in ("taste", "blend"):
            if mode not in wide:
                cells.append("–")
                continue
            d = paired_difference(wide[mode].to_numpy(), wide["content"].to_numpy())
            cells.append(f"{d.value:+.3f} [{d.low:+.3f}, {d.high:+.3f}] (n={d.n})")
        lines.append(f"| {family} | {method} | {metric} | " + " | ".join(cells) + " |")
    lines += ["", "| family | mode | task | ARI | cluster pool precision | neighbour pool precision | CFRAG pool "
              "precision |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for family, modes in quality.items():
        for mode, per_task in modes.items():
            for task, q in per_task.items():
                lines.append(f"| {family} | {mode} | {task} | {q['ari']} | {q['cluster_pp']} | {q['neighbour_pp']} | "
                             f"{q['cfrag_pp']} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    """Run every family and print the comparison."""
    parser = world_parser(__doc__.splitlines()[0], users=64, dev=32, tasks="LaMP-2,LaMP-4")
    parser.add_argument("--families", default="communities,split_taste,no_community")
    parser.add_argument("--modes", default="taste,blend")
    parser.add_argument("--weight", type=float, default=0.5, help="clustering.taste_weight of the blend")
    args = parser.parse_args()
    out = Path(args.out)
    tables, quality = [], {}
    for family in args.families.split(","):
        table, quality[family] = run_family(out, family, args)
        tables.append(table)
        pd.concat(tables).to_parquet(out / "scores.parquet")
        (out / "quality.json").write_text(json.dumps(quality, indent=1))
    print(report(pd.concat(tables), quality))


if __name__ == "__main__":
    main()
