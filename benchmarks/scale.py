"""Per-stage wall time and peak memory of every non-LLM stage at growing task sizes, and incremental vs full (issue 14).

    nice -n 10 python benchmarks/scale.py --random-vectors --home /tmp/prag-scale --sizes 200x185 2000x185 20000x185
    nice -n 10 python benchmarks/scale.py --random-vectors --home /tmp/prag-scale --sizes 3200x185 --incremental-only

A size UxD is one synthetic LaMP-2 task of U users with D profile documents each (U·D documents, one dev sample per
user), written straight into prag's tables in the loader's format (benchmarks/scale_stages.py). Users belong to 40
planted communities. --random-vectors replaces the encoder with random unit vectors around each community's centre
(parsed from the text), so every non-embedding stage is measured at full LaMP scale (20,000 users × 185 = 3.7 M
documents) on a CPU. Each stage runs in a fresh child process calling the prag_models function its asset calls and
writing its table; the child reports wall time and its own peak RSS (ru_maxrss, DuckDB's buffer pool included: set
PRAG_DUCKDB_MEMORY_LIMIT). Then 1 % of the users get 5 new history documents each: the incremental update (update,
neighbour refresh, the history checks on the changed rows) and a full run of what it replaces (document embeddings →
user embeddings → clusters → similar users, the same checks on every row) are timed the same way, in the same run.

Results are kept per stage in <home>/<size>/results.json: a rerun with the same --home skips the finished stages
(--redo STAGE … runs them again), so a long run can be resumed piece by piece. Prints the tables, the growth exponent
of each stage (slope of log seconds and log peak RSS against log documents between the smallest and largest size)
and the incremental / full ratio of each size.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scale_stages import COMMUNITIES, STAGES, TASK  # noqa: E402

#: The first incremental update after the full stages pays DuckDB's merge of the row groups those full writes left
#: (once); the second is the steady state of a stream of updates; then the full run of what they replace.
INCREMENTAL = ("incremental", "incremental_next", "full")
USERS_STAGES = ("document_embeddings", "query_embeddings", "user_embeddings", "user_clusters", "similar_users")


def child(stage: str, db: Path, random_vectors: bool, checks: bool) -> None:
    """Run one stage (or the incremental / full sequence) on the file; print one JSON line."""
    import scale_stages as ss

    from prag_models.storage.store import connect

    settings, emb = ss.settings_for(db.parent), ss.embedder(random_vectors)
    import faiss  # noqa: F401 - imported before the clock starts, as in a warm process
    import hdbscan  # noqa: F401
    import sklearn.decomposition  # noqa: F401
    import torch  # noqa: F401

    stand_in = False
    if stage == "cfrag_similar_users":
        with connect(db) as con:
            stand_in = ss.stand_in_cfrag_embeddings(con)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    with connect(db) as con:
        if stage == "incremental":
            stats = ss.incremental(con, settings, emb, checks)
        elif stage == "full":
            stats = ss.full(con, settings, emb, checks)
        else:
            stats = ss.stage_functions(settings, emb)[stage](con)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if stand_in:
        stats["stand_in"] = "cfrag_user_embeddings = user_embeddings (the encoder did not run at this size)"
    print(json.dumps({"stage": stage, "seconds": seconds, "peak_rss_mb": peak, "import_rss_mb": base, "stats": stats},
                     default=str))  # fmt: skip


def _run(stage: str, db: Path, random_vectors: bool, checks: bool = True) -> dict:
    """One stage in a fresh child process."""
    cmd = [sys.executable, __file__, "--child", stage, "--db", str(db)] + ["--random-vectors"] * random_vectors
    proc = subprocess.run(cmd + ["--no-checks"] * (not checks), capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"{stage} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def change_users(db: Path, share: float, round_: int = 0, n_docs: int = 5) -> int:
    """Give ceil(share · users) users n_docs new history documents each (prag ingest's library call); each round
    (a repeated incremental measurement) adds other documents to other users."""
    from prag_models.data.history import ingest_files
    from prag_models.storage.store import connect

    with connect(db) as con:
        users = [u for (u,) in con.execute("SELECT DISTINCT user_id FROM profile_documents ORDER BY 1").fetchall()]
        chosen = users[round_ :: max(1, len(users) // max(1, math.ceil(share * len(users))))]
        records = [{"user_id": u, "id": f"new{round_ or ''}-{u}-{i}", "date": "2021-01-01",
                    "description": f"c{(i * 3) % COMMUNITIES} new doc {i} of {u}", "tag": "comedy"}
                   for u in chosen for i in range(n_docs)]  # fmt: skip
        path = db.parent / "changes.json"
        path.write_text(json.dumps(records), encoding="utf-8")
        ingest_files(con, [path], TASK)
    return len(chosen)


def measure(home: Path, size: str, stages: list[str], args: argparse.Namespace) -> dict:
    """Build (or reuse) one size, run the stages not yet measured, then incremental vs full; results.json kept."""
    users, docs = (int(v) for v in size.split("x"))
    folder = home / size
    db, saved = folder / "prag.duckdb", folder / "results.json"
    folder.mkdir(parents=True, exist_ok=True)
    result = json.loads(saved.read_text()) if saved.exists() and db.exists() else {}
    if not result:
        db.unlink(missing_ok=True)
        from scale_stages import build

        build(db, users, docs)
        result = {"size": size, "docs": users * docs, "users": users}
    for stage in [*stages, *(INCREMENTAL if not args.no_incremental else ())]:
        if stage in result and stage not in args.redo:
            continue
        if stage.startswith("incremental"):  # a fresh change for every measurement
            result["change_round"] = result.get("change_round", 0 if "changed" in result else -1) + 1
            result["changed"] = change_users(db, args.share, result["change_round"])
        child_stage = "incremental" if stage.startswith("incremental") else stage
        result[stage] = _run(child_stage, db, args.random_vectors, not args.no_checks)
        if stage.startswith("incremental") and not result[stage]["stats"]["users_updated"]:
            raise SystemExit(f"{size}: the incremental run found no pending change")
        print(f"[scale] {size} {stage}: {result[stage]['seconds']:.1f} s, "
              f"{result[stage]['peak_rss_mb']:.0f} MB", flush=True)  # fmt: skip
        saved.write_text(json.dumps(result, indent=1, default=str))
    return result


def main() -> None:
    """Measure each size (resuming from --home), then print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["200x185", "2000x185", "20000x185"], help="USERSxDOCS")
    parser.add_argument("--random-vectors", action="store_true", help="random unit vectors instead of the encoder")
    parser.add_argument("--share", type=float, default=0.01, help="share of users changed for the incremental run")
    parser.add_argument("--home", default="", help="folder for the benchmark files, reused (default: a temporary one)")
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES, metavar="STAGE")
    parser.add_argument("--incremental-only", action="store_true", help="only the users stages and incremental/full")
    parser.add_argument("--no-incremental", action="store_true", help="skip incremental / full")
    parser.add_argument("--no-checks", action="store_true", help="incremental / full without the history checks")
    parser.add_argument("--redo", nargs="*", default=[], help="stages to run again although results.json has them")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, Path(args.db), args.random_vectors, not args.no_checks)
        return
    home = Path(args.home or tempfile.mkdtemp(prefix="prag-scale-")).resolve()
    stages = list(USERS_STAGES) if args.incremental_only else [s for s in STAGES if s in args.stages]
    print(f"[scale] home {home}; PRAG_DUCKDB_MEMORY_LIMIT={os.environ.get('PRAG_DUCKDB_MEMORY_LIMIT', '')!r}")
    rows = [measure(home, size, stages, args) for size in args.sizes]
    report(rows)
    parts_report(rows)


def report(rows: list[dict]) -> None:
    """Markdown tables: seconds and peak RSS per stage and size, growth exponents, incremental / full."""
    names = [n for n in [*STAGES, *INCREMENTAL] if any(n in r for r in rows)]
    print("\n| stage | " + " | ".join(f"{r['size']} ({r['docs']:,} docs) s / MB" for r in rows)
          + " | exp. time | exp. RSS |")  # fmt: skip
    print("|---" * (len(rows) + 3) + "|")
    for name in names:
        have = [r for r in rows if name in r]
        cells = " | ".join(f"{r[name]['seconds']:.2f} / {r[name]['peak_rss_mb']:.0f}" if name in r else "–"
                           for r in rows)  # fmt: skip
        lo, hi = have[0], have[-1]
        span = math.log(hi["docs"] / lo["docs"]) if len(have) > 1 else 0
        exp_t = math.log(hi[name]["seconds"] / lo[name]["seconds"]) / span if span else float("nan")
        exp_m = math.log(hi[name]["peak_rss_mb"] / lo[name]["peak_rss_mb"]) / span if span else float("nan")
        print(f"| {name} | {cells} | {exp_t:.2f} | {exp_m:.2f} |")
    for r in rows:
        for name in ("incremental", "incremental_next"):
            if name in r and "full" in r:
                ratio = r[name]["seconds"] / r["full"]["seconds"]
                print(f"\n{r['size']}: {r['changed']} of {r['users']} users changed; {name} / full = {ratio:.3f} "
                      f"({r[name]['stats']})")  # fmt: skip
        for name in ("user_clusters", "baseline_retrievals", "clusterrag_retrievals"):
            if name in r:
                print(f"{r['size']} {name}: {json.dumps(_brief(r[name]['stats']), default=str)}")


def parts_report(rows: list[dict], stages: tuple[str, ...] = ("baseline_retrievals", "clusterrag_retrievals")) -> None:
    """Seconds of each part of the retrieval stages (their ``seconds`` statistics) per size and the growth exponent:
    which part is per document (own-profile methods: ~1) and which searches every query against a pool that grows
    with the task (dense_global: queries x per-query search)."""
    for stage in stages:
        have = [r for r in rows if isinstance(r.get(stage, {}).get("stats", {}).get("seconds"), dict)]
        if len(have) < 2:
            continue
        lo, hi = have[0], have[-1]
        span = math.log(hi["docs"] / lo["docs"])
        print(f"\n{stage}, seconds per part | " + " | ".join(f"{r['size']}" for r in have) + " | exp. |")
        print("|---" * (len(have) + 2) + "|")
        for part in hi[stage]["stats"]["seconds"]:
            values = [r[stage]["stats"]["seconds"].get(part) for r in have]
            if values[0] and values[-1]:
                exponent = math.log(values[-1] / values[0]) / span
                print(f"| {part} | " + " | ".join(f"{v:.2f}" for v in values) + f" | {exponent:.2f} |")


def _brief(stats: dict) -> dict:
    """The cost figures of a stage's statistics (not the per-method sample counts)."""
    return {k: v for k, v in stats.items() if not (isinstance(v, dict) and "samples" in v)}


if __name__ == "__main__":
    main()
