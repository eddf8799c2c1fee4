"""Incremental user update vs full re-materialization after 1 % of the users get new documents (docs/methods.md §3.7).

    python benchmarks/incremental_vs_full.py [--tasks LaMP-2 LaMP-3] [--users 48] [--share 0.01] [--docs 5] [--home DIR]

On the embedded demo at its default size (48 users per task, every task), the base graph is materialized up to the
similar users and the clustering snapshot (untimed). Then ceil(share · users) users per task (at least one) get new
documents (copies, with new wording, of documents of a user from another cluster), ingested with `prag ingest`'s
library call. Two child processes, each with the embedder, hdbscan and Great Expectations already loaded, time:

- incremental: the `incremental_update_job` assets (ingest, update the changed users, refresh their clusters'
  neighbours) with their checks;
- full: `document_embeddings` → `user_embeddings` → `user_clusters` → `similar_users` with their checks, after the
  new documents' embeddings are removed from the cache so both runs embed the same new texts.

Prints wall times, their ratio, the peak RSS of each child during its timed run (and how far it rose above the warm
process), and the adjusted Rand index between the incremental assignment and the full re-clustering.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prag_models.config.settings import ALL_TASKS, load_settings  # noqa: E402

BASE = ["lamp_samples", "profile_documents", "document_embeddings", "query_embeddings", "user_embeddings",
        "user_clusters", "similar_users", "cluster_drift", "cluster_state"]  # fmt: skip
STAGES = {
    "incremental": ["profile_history", "incremental_user_clusters", "incremental_similar_users"],
    "full": ["document_embeddings", "user_embeddings", "user_clusters", "similar_users"],
}


def _materialize(config: Path, tasks: list[str], selection: list[str]) -> bool:
    """One in-process run over the task range with the project's definitions (checks included)."""
    import dagster as dg

    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources

    ordered = [t for t in ALL_TASKS if t in tasks]
    result = dg.materialize(
        list(defs.assets) + list(defs.asset_checks),
        selection=selection,
        resources=default_resources(config_file=str(config)),
        tags={"dagster/asset_partition_range_start": ordered[0], "dagster/asset_partition_range_end": ordered[-1]},
        raise_on_error=False,
    )
    return result.success


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux /proc/self/clear_refs); False when unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_mb() -> float:
    """Peak resident set size since the last reset (VmHWM), else since the process started (MB)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_now_mb() -> float:
    """Current resident set size (MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(stage: str, config: Path, tasks: list[str]) -> None:
    """Warm up the models, then time one stage; print one JSON line."""
    import logging
    import os

    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("dagster").setLevel(logging.WARNING)
    import great_expectations  # noqa: F401
    import hdbscan  # noqa: F401

    from prag_models.text.embedder import load_embedder

    settings = load_settings(config)
    t0 = time.perf_counter()
    load_embedder(settings.embedder).embed(["warm up"])
    warm_s = time.perf_counter() - t0
    _materialize(config, tasks, ["lamp_samples"])  # warm Dagster and the GX context on an untouched asset
    before = _rss_now_mb()
    reset = _reset_peak()
    t0 = time.perf_counter()
    ok = _materialize(config, tasks, STAGES[stage])
    seconds = time.perf_counter() - t0
    peak = _peak_mb()
    print(json.dumps({"stage": stage, "ok": ok, "seconds": seconds, "peak_rss_mb": peak, "peak_is_run_only": reset,
                      "rss_growth_mb": peak - before, "model_load_s": warm_s}))  # fmt: skip


def _run_child(stage: str, config: Path, tasks: list[str]) -> dict:
    """Run one timed stage in a fresh Python process."""
    cmd = [sys.executable, __file__, "--child", stage, "--config", str(config), "--tasks", *tasks]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"{stage} failed:\n{proc.stderr[-4000:]}")
    out = json.loads(lines[-1])
    if not out["ok"]:
        raise SystemExit(f"{stage}: the run failed:\n{proc.stderr[-4000:]}")
    return out


def _changes(config: Path, tasks: list[str], share: float, n_docs: int) -> tuple[dict[str, list[str]], list[str]]:
    """Give ceil(share · users) users per task new documents; returns changed users and the new content hashes."""
    from prag_models.data.history import ingest_files
    from prag_models.storage.store import connect

    settings = load_settings(config)
    changed: dict[str, list[str]] = {}
    hashes: list[str] = []
    with connect(settings.duckdb_path) as con:
        for task in tasks:
            clusters = con.execute("SELECT user_id, cluster FROM user_clusters WHERE task = ? ORDER BY user_id",
                                   [task]).fetchall()  # fmt: skip
            n = max(1, math.ceil(share * len(clusters)))
            chosen = clusters[:: max(1, len(clusters) // n)][:n]
            records = []
            for user, cluster in chosen:
                donor = next((u for u, c in clusters if c != cluster), clusters[-1][0])
                sql = "SELECT doc_id, date, fields_json FROM profile_documents WHERE task = ? AND user_id = ? " \
                      "ORDER BY position LIMIT ?"  # fmt: skip
                docs = con.execute(sql, [task, donor, n_docs]).fetchall()
                for doc_id, date, fields in docs:
                    f = {k: (v + " (seen again)" if k not in ("tag", "score") else v)
                         for k, v in json.loads(fields).items()}  # fmt: skip
                    records.append({"user_id": user, "id": f"bench-{doc_id}", "date": date, **f})
            changed[task] = [u for u, _ in chosen]
            path = settings.home_path / f"bench_{task}.json"
            path.write_text(json.dumps(records), encoding="utf-8")
            batch = ingest_files(con, [path], task)
            assert sum(n for _, _, n in batch.batches) == len(records)
        hashes = [h for (h,) in con.execute("SELECT content_hash FROM profile_history").fetchall()]
    return changed, hashes


def main() -> None:
    """Set up the demo, change 1 % of the users, time both stages in child processes, print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(ALL_TASKS))
    parser.add_argument("--share", type=float, default=0.01, help="share of users that get new documents")
    parser.add_argument("--docs", type=int, default=5, help="new documents per changed user")
    parser.add_argument("--users", type=int, default=0, help="demo users per task (0 = the demo's default, 48)")
    parser.add_argument("--home", default="", help="prag home for the benchmark (default: a temporary folder)")
    parser.add_argument("--child", choices=sorted(STAGES), help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, Path(args.config), args.tasks)
        return
    home = Path(args.home or tempfile.mkdtemp(prefix="prag-bench-")).resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "bench.toml"
    tasks = ", ".join(f'"{t}"' for t in args.tasks)
    users = f"demo_users = {args.users}\n" if args.users else ""
    config.write_text(f'home = "{home}"\n[data]\ntasks = [{tasks}]\n{users}[generator]\nbackend = "fake"\n', "utf-8")
    size = f"{args.users} users per task" if args.users else "default size"
    print(f"[bench] home {home}; demo at {size}; tasks {args.tasks}", flush=True)
    t0 = time.perf_counter()
    if not _materialize(config, args.tasks, BASE):
        raise SystemExit("base materialization failed")
    print(f"[bench] base graph materialized in {time.perf_counter() - t0:.1f} s", flush=True)
    changed, hashes = _changes(config, args.tasks, args.share, args.docs)
    n_users = sum(len(u) for u in changed.values())
    print(f"[bench] changed users: {changed}", flush=True)
    inc = _run_child("incremental", config, args.tasks)
    from prag_models.storage.store import connect
    from prag_models.users.incremental import clustering_drift

    settings = load_settings(config)
    with connect(settings.duckdb_path) as con:
        after_inc = con.execute("SELECT task, user_id, cluster FROM user_clusters").fetchall()
        con.execute("DELETE FROM embedding_cache WHERE content_hash IN (SELECT unnest(?::VARCHAR[]))", [hashes])
        total_users = con.execute("SELECT count(*) FROM user_clusters").fetchall()[0][0]
    full = _run_child("full", config, args.tasks)
    with connect(settings.duckdb_path, read_only=True) as con:
        after_full = con.execute("SELECT task, user_id, cluster FROM user_clusters").fetchall()
    rands = {}
    for task in args.tasks:
        a = {u: c for t, u, c in after_inc if t == task}
        b = {u: c for t, u, c in after_full if t == task}
        rands[task] = clustering_drift(a, b)["adjusted_rand"]
    ratio = full["seconds"] / inc["seconds"]
    print(f"\n{n_users} of {total_users} users changed ({args.docs} new documents each), {len(args.tasks)} tasks\n")
    print("| stage | wall s | peak RSS MB (during the run) | peak above the warm process MB |\n|---|---|---|---|")
    for r in (inc, full):
        print(f"| {r['stage']} | {r['seconds']:.2f} | {r['peak_rss_mb']:.0f} | {r['rss_growth_mb']:.0f} |")
    print(f"\nfull / incremental wall time: {ratio:.1f}x (embedder load, untimed: {inc['model_load_s']:.1f} s)")
    print(f"adjusted Rand index, incremental assignment vs full re-clustering: {rands}")


if __name__ == "__main__":
    main()
