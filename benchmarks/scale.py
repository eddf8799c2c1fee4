"""Per-stage wall time and peak memory of the non-LLM stages at growing task sizes, and incremental vs full (issue 14).

    nice -n 10 python benchmarks/scale.py --random-vectors --sizes 200x50 2000x50 10000x100 [--home DIR]

A size UxD is one synthetic LaMP-2 task of U users with D profile documents each (U·D documents, one dev sample per
user), written straight into prag's tables in the loader's format (profile_documents, lamp_samples; not through
LaMP JSON files). Users belong to 40 planted communities. --random-vectors replaces the encoder with random unit
vectors around each community's centre (parsed from the text), so every non-embedding stage is measured at sizes the
CPU encoder could not embed in a session. Each stage runs in a fresh child process calling the prag_models stage
and writing its table; the child reports wall time and its own peak RSS (ru_maxrss). Then 1 % of the users get 5
new history documents each: the incremental update (update_users + refresh_similar_users) and a full re-run of
document_embeddings → user_embeddings → user_clusters → similar_users are timed the same way, in the same run.
Asset checks (Great Expectations) are not part of these timings. Prints the table, the growth exponent of each stage
(slope of log seconds and log peak RSS against log documents between the smallest and largest size) and the ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASK, COMMUNITIES, DIM, MODEL = "LaMP-2", 40, 384, "random-unit-vectors"
STAGES = ["document_embeddings", "query_embeddings", "user_embeddings", "user_clusters", "similar_users"]
FULL = ["document_embeddings", "user_embeddings", "user_clusters", "similar_users"]


class RandomEmbedder:
    """Unit vectors around the centre of the community named in the text (``c<k> …``), seeded by the text."""

    model_id = MODEL
    dim = DIM

    def __init__(self) -> None:
        import numpy as np

        self.centres = np.random.default_rng(0).standard_normal((COMMUNITIES, DIM)).astype(np.float32)

    def embed(self, texts, progress=None):
        """(n, DIM) float32 unit vectors."""
        import numpy as np

        comm = np.array([int(m.group(1)) % COMMUNITIES if (m := re.search(r"\bc(\d+) ", t)) else 0 for t in texts])
        seed = abs(hash(texts[0])) % 2**32 if len(texts) else 0
        noise = np.random.default_rng(seed).standard_normal((len(texts), DIM)).astype(np.float32)
        x = self.centres[comm] / math.sqrt(DIM) * 1.2 + noise / math.sqrt(DIM)
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def _embedder(random_vectors: bool):
    """The random embedder, or the configured encoder."""
    if random_vectors:
        return RandomEmbedder()
    from prag_models.config import load_settings
    from prag_models.text.embedder import load_embedder

    return load_embedder(load_settings().embedder)


def build(db: Path, users: int, docs: int) -> None:
    """Write the synthetic task (profile_documents, lamp_samples) with DuckDB alone."""
    from prag_models.store import connect

    text = f"printf('c%d doc %d of user %d about things', CASE WHEN j % 5 = 0 THEN (u * 7 + j) % {COMMUNITIES} " \
           f"ELSE u % {COMMUNITIES} END, j, u)"  # fmt: skip
    with connect(db) as con:
        con.execute(
            f"CREATE OR REPLACE TABLE profile_documents AS SELECT '{TASK}' AS task, printf('u%07d', u) AS user_id, "
            f"printf('d%010d', u * {docs} + j) AS doc_id, printf('2020-01-%02d', 1 + j % 28) AS date, "
            f"j::BIGINT AS position, {text} AS text, json_object('description', {text}, 'tag', 'comedy') AS "
            f"fields_json, substr(sha256({text}), 1, 32) AS content_hash FROM range({users}) a(u), range({docs}) b(j)"
        )
        con.execute(
            f"CREATE OR REPLACE TABLE lamp_samples AS SELECT '{TASK}' AS task, 'dev' AS split, printf('s%07d', u) "
            f"AS sample_id, printf('u%07d', u) AS user_id, 'input' AS input, printf('c%d query of user %d', "
            f"u % {COMMUNITIES}, u) AS query, 'comedy' AS gold FROM range({users}) a(u)"
        )


def _settings(home: Path):
    """Settings of the benchmark (LaMP source, the default clustering)."""
    from prag_models.config import load_settings

    return load_settings(None, environ={}, home=str(home), data={"source": "lamp", "lamp_dir": str(home)})


def child(stage: str, db: Path, random_vectors: bool) -> None:
    """Run one stage (or the incremental / full sequence) on the file; print one JSON line."""
    import prag_models.stages.embeddings as emb
    import prag_models.stages.users as usr
    from prag_models.store import connect, replace_rows
    from prag_models.users.incremental import refresh_similar_users, update_users

    settings, embedder = _settings(db.parent), _embedder(random_vectors)
    builds = {
        "document_embeddings": lambda con: emb.document_embedding_rows(con, TASK, embedder),
        "query_embeddings": lambda con: emb.query_embedding_rows(con, TASK, embedder),
        "user_embeddings": lambda con: usr.user_embedding_rows(con, TASK),
        "user_clusters": lambda con: usr.user_cluster_rows(con, TASK, settings),
        "similar_users": lambda con: usr.similar_user_rows(con, TASK, settings),
    }
    import hdbscan  # noqa: F401 - imported before the clock starts, as in a warm process
    import sklearn.decomposition  # noqa: F401
    import sklearn.metrics  # noqa: F401

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats: dict = {}
    t0 = time.perf_counter()
    with connect(db) as con:
        if stage == "incremental":
            report = update_users(con, TASK, embedder.embed, embedder.model_id, settings.clustering)
            refresh = refresh_similar_users(con, TASK, settings.clustering.similar_users)
            stats = {"users_updated": len(report.users), "reference": report.reference,
                     "lists_refreshed": refresh["users"], "clusters_touched": refresh["clusters"]}  # fmt: skip
        else:
            for name in FULL if stage == "full" else [stage]:
                frame, stats[name] = builds[name](con)
                replace_rows(con, name, frame, {"task": TASK})
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"stage": stage, "seconds": seconds, "peak_rss_mb": peak, "import_rss_mb": base, "stats": stats},
                     default=str))  # fmt: skip


def _run(stage: str, db: Path, random_vectors: bool) -> dict:
    """One stage in a fresh child process."""
    cmd = [sys.executable, __file__, "--child", stage, "--db", str(db)] + (["--random-vectors"] * random_vectors)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"{stage} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def change_users(db: Path, share: float, n_docs: int = 5) -> int:
    """Give ceil(share · users) users n_docs new history documents each (prag ingest's library call)."""
    from prag_models.data.history import ingest_files
    from prag_models.store import connect

    with connect(db) as con:
        users = [u for (u,) in con.execute("SELECT DISTINCT user_id FROM profile_documents ORDER BY 1").fetchall()]
        chosen = users[:: max(1, len(users) // max(1, math.ceil(share * len(users))))]
        records = [{"user_id": u, "id": f"new-{u}-{i}", "date": "2021-01-01",
                    "description": f"c{(i * 3) % COMMUNITIES} new doc {i} of {u}", "tag": "comedy"}
                   for u in chosen for i in range(n_docs)]  # fmt: skip
        path = db.parent / "changes.json"
        path.write_text(json.dumps(records), encoding="utf-8")
        ingest_files(con, [path], TASK)
    return len(chosen)


def main() -> None:
    """Build each size, time every stage in a child, then incremental vs full; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["200x50", "2000x50", "10000x100"], help="USERSxDOCS")
    parser.add_argument("--random-vectors", action="store_true", help="random unit vectors instead of the encoder")
    parser.add_argument("--share", type=float, default=0.01, help="share of users changed for the incremental run")
    parser.add_argument("--home", default="", help="folder for the benchmark files (default: a temporary one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, Path(args.db), args.random_vectors)
        return
    home = Path(args.home or tempfile.mkdtemp(prefix="prag-scale-")).resolve()
    rows = []
    for size in args.sizes:
        users, docs = (int(v) for v in size.split("x"))
        db = home / size / "prag.duckdb"
        db.parent.mkdir(parents=True, exist_ok=True)
        db.unlink(missing_ok=True)
        build(db, users, docs)
        result = {"size": size, "docs": users * docs, "users": users}
        for stage in STAGES:
            result[stage] = _run(stage, db, args.random_vectors)
            print(f"[scale] {size} {stage}: {result[stage]['seconds']:.1f} s, "
                  f"{result[stage]['peak_rss_mb']:.0f} MB", flush=True)  # fmt: skip
        result["changed"] = change_users(db, args.share)
        result["incremental"] = _run("incremental", db, args.random_vectors)
        result["full"] = _run("full", db, args.random_vectors)
        print(f"[scale] {size} incremental {result['incremental']['seconds']:.1f} s, "
              f"full {result['full']['seconds']:.1f} s", flush=True)  # fmt: skip
        rows.append(result)
    (home / "scale.json").write_text(json.dumps(rows, indent=1, default=str))
    report(rows)


def report(rows: list[dict]) -> None:
    """Markdown tables: seconds and peak RSS per stage and size, growth exponents, incremental / full."""
    names = STAGES + ["incremental", "full"]
    print(
        "\n| stage | "
        + " | ".join(f"{r['size']} ({r['docs']:,} docs) s / MB" for r in rows)
        + " | exp. time | exp. RSS |"
    )
    print("|---" * (len(rows) + 3) + "|")
    lo, hi = rows[0], rows[-1]
    span = math.log(hi["docs"] / lo["docs"]) if len(rows) > 1 else 0
    for name in names:
        cells = " | ".join(f"{r[name]['seconds']:.2f} / {r[name]['peak_rss_mb']:.0f}" for r in rows)
        exp_t = math.log(hi[name]["seconds"] / lo[name]["seconds"]) / span if span else float("nan")
        exp_m = math.log(hi[name]["peak_rss_mb"] / lo[name]["peak_rss_mb"]) / span if span else float("nan")
        print(f"| {name} | {cells} | {exp_t:.2f} | {exp_m:.2f} |")
    for r in rows:
        ratio = r["incremental"]["seconds"] / r["full"]["seconds"]
        print(f"\n{r['size']}: {r['changed']} of {r['users']} users changed; incremental / full = {ratio:.3f} "
              f"({r['incremental']['stats']}); clustering: {r['user_clusters']['stats']}")  # fmt: skip


if __name__ == "__main__":
    main()
