"""Latency of the served champion: `mlflow models serve` of the CFRAG reranker answering /invocations (issue 26).

    nice -n 10 python benchmarks/serving_latency.py --home /tmp/prag-latency --sizes demo 370000

Each request is one (task, user_id, query) row: CFRAG retrieval and reranking (top-m users by e_u, the trained
retriever's k per user, the reranker's final top-k), no LLM. ``demo`` is the README demo's LaMP-2 (built once in
<home>/demo with the fake generator: ``prag materialize --select '*cfrag_retrievals'``). A size N copies that
DuckDB file and adds synthetic users of 185 documents each until LaMP-2 holds N documents: random unit vectors in
``document_embeddings`` (the demo embedder's id and dimension), random e_u in ``cfrag_user_embeddings`` and six random
neighbours in ``cfrag_similar_users`` — every table the served model reads, so the model's load and a request see
the corpus at that size while the models (registered in the demo's MLflow store) stay the same.

Per size: the server's start until /ping answers (model load), the first request (cold), then ``--requests`` warm
requests one at a time (p50 / p95 / p99), half by the demo's users with their dev queries, half by synthetic users;
and the server's peak RSS. Results go to <home>/serving_latency.json. Goals (issue 26): warm p95 <= 50 ms at the
demo's size and <= 100 ms at 370,000 documents, the first request <= 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TASK, DOCS_PER_USER, NEIGHBOURS = "LaMP-2", 185, 6
MODEL = "prag-reranker-LaMP-2"
CONFIG = """home = "{home}"
[data]
tasks = ["LaMP-2"]
[generator]
backend = "fake"
threads = 1
"""


def _env(home: Path | None = None) -> dict[str, str]:
    """The environment of prag and mlflow: this checkout first on the path, offline, the demo's store."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    if home is not None:
        env["PRAG_HOME"] = str(home)
    return env


def build_demo(folder: Path) -> Path:
    """The demo's LaMP-2 up to the registered CFRAG models and their tables (once); returns the home."""
    home = folder / "home"
    if (home / "prag.duckdb").exists() and (home / "mlflow.db").exists():
        return home
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "prag.toml"
    config.write_text(CONFIG.format(home=home), encoding="utf-8")
    cmd = [str(Path(sys.executable).parent / "prag"), "materialize", "--select", "*cfrag_retrievals"]
    subprocess.run(cmd, env={**_env(), "PRAG_CONFIG": str(config)}, cwd=ROOT, check=True)
    return home


def scaled_copy(demo: Path, folder: Path, documents: int, seed: int = 0) -> Path:
    """A copy of the demo's DuckDB file whose LaMP-2 holds ``documents`` documents (synthetic users added)."""
    import duckdb
    import pyarrow as pa

    from prag_models.storage.store import matrix_to_column

    db = folder / "prag.duckdb"
    if db.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(demo / "prag.duckdb", folder / "building.duckdb")
    rng = np.random.default_rng(seed)
    with duckdb.connect(str(folder / "building.duckdb")) as con:
        have = con.execute("SELECT count(*) FROM document_embeddings WHERE task = ?", [TASK]).fetchall()[0][0]
        model_id, dim = con.execute("SELECT model_id, len(embedding) FROM document_embeddings WHERE task = ? LIMIT 1",
                                    [TASK]).fetchall()[0]  # fmt: skip
        e_dim = con.execute("SELECT len(embedding) FROM cfrag_user_embeddings WHERE task = ? LIMIT 1",
                            [TASK]).fetchall()[0][0]  # fmt: skip
        users = max(0, (documents - have) // DOCS_PER_USER)
        ids = [f"syn{u:07d}" for u in range(users)]
        for start in range(0, users, 2000):  # 370,000 vectors per batch at most
            part = ids[start : start + 2000]
            n = len(part) * DOCS_PER_USER
            owner = np.repeat(part, DOCS_PER_USER)
            pos = np.tile(np.arange(DOCS_PER_USER), len(part))
            doc = np.char.add(np.char.add(owner.astype(str), "-"), pos.astype(str))
            text = np.char.add("synthetic movie description number ", pos.astype(str))
            vectors = rng.standard_normal((n, dim), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            batch = pa.table({"user_id": owner, "doc_id": doc, "position": pos.astype(np.int64), "text": text,
                              "embedding": matrix_to_column(vectors)})  # fmt: skip
            con.register("batch", batch)
            con.execute("INSERT INTO profile_documents SELECT ? AS task, user_id, doc_id, '2020-01-01' AS date, "
                        "position, text, json_object('description', text, 'tag', 'comedy') AS fields_json, "
                        "md5(text) AS content_hash FROM batch", [TASK])  # fmt: skip
            con.execute("INSERT INTO document_embeddings SELECT ? AS task, user_id, doc_id, position, ? AS model_id, "
                        "md5(text) AS content_hash, embedding FROM batch", [TASK, model_id])  # fmt: skip
            con.unregister("batch")
        e_u = rng.standard_normal((users, e_dim), dtype=np.float32)
        con.register("eu", pa.table({"user_id": ids, "embedding": list(e_u)}))
        con.execute("INSERT INTO cfrag_user_embeddings SELECT ? AS task, user_id, embedding FROM eu", [TASK])
        picks = rng.integers(0, max(users, 1), size=(users, NEIGHBOURS - 1))
        rows: list[tuple] = []
        for i, u in enumerate(ids):
            rows.append((u, u, 1, 1.0))
            rows += [(u, ids[int(j)], r + 2, 0.5) for r, j in enumerate(picks[i])]
        con.register("sim", pa.table(dict(zip(("user_id", "neighbour_id", "rank", "similarity"),
                                                  map(list, zip(*rows, strict=True)), strict=True))))  # fmt: skip
        con.execute("INSERT INTO cfrag_similar_users SELECT ? AS task, user_id, neighbour_id, rank, similarity "
                    "FROM sim", [TASK])  # fmt: skip
        con.execute("CHECKPOINT")
    (folder / "building.duckdb").rename(db)
    return folder


def _post(url: str, rows: list[dict]) -> float:
    """Seconds of one /invocations request."""
    body = json.dumps({"dataframe_records": rows}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        answer = json.loads(response.read())
    seconds = time.perf_counter() - started
    if not answer["predictions"] or not answer["predictions"][0]["doc_ids"]:
        raise SystemExit(f"empty answer: {answer}")
    return seconds


def _rss_mb(pid: int) -> float:
    """Peak RSS (VmHWM) of a process and its descendants, MB."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")) / 1024
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except (OSError, StopIteration):
            continue
        todo += [int(c) for c in children]
    return total


def measure(demo: Path, home: Path, requests: int, port: int) -> dict:
    """Serve the champion over ``home``'s DuckDB file; startup, cold and warm request times."""
    import duckdb

    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        documents = con.execute("SELECT count(*) FROM document_embeddings WHERE task = ?", [TASK]).fetchone()[0]
        asks = con.execute("SELECT user_id, query FROM lamp_samples WHERE task = ? AND split = 'dev' ORDER BY "
                           "sample_id", [TASK]).fetchall()  # fmt: skip
        synthetic = [u for (u,) in con.execute("SELECT DISTINCT user_id FROM cfrag_user_embeddings WHERE task = ? "
                                               "AND user_id LIKE 'syn%' ORDER BY 1 LIMIT 500", [TASK]).fetchall()]
    env = {**_env(home), "MLFLOW_TRACKING_URI": f"sqlite:///{demo / 'mlflow.db'}"}
    cmd = [str(Path(sys.executable).parent / "mlflow"), "models", "serve", "-m", f"models:/{MODEL}@champion",
           "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port), "-w", "1"]  # fmt: skip
    log = (home / "serve.log").open("w")
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"mlflow models serve exited: {(home / 'serve.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5):
                    break
            except OSError:
                time.sleep(0.2)
        ready = time.perf_counter() - started
        url = f"http://127.0.0.1:{port}/invocations"
        rows = []  # alternately a demo user with its dev query and a synthetic user with a dev query
        for i in range(requests + 1):
            user, query = asks[(i // 2) % len(asks)]
            rows.append((synthetic[(i // 2) % len(synthetic)] if i % 2 and synthetic else user, query))
        one = [{"task": TASK, "user_id": u, "query": q} for u, q in rows]
        cold = _post(url, [one[0]])
        warm = np.asarray([_post(url, [r]) for r in one[1:]]) * 1000
        rss = _rss_mb(proc.pid)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
        log.close()
    p50, p95, p99 = (float(np.percentile(warm, q)) for q in (50, 95, 99))
    return {"documents": int(documents), "startup_s": round(ready, 2), "first_request_s": round(cold, 3),
            "warm_requests": len(warm), "p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "p99_ms": round(p99, 1),
            "peak_rss_mb": round(rss)}  # fmt: skip


def main() -> None:
    """Build the sizes, serve and measure each, print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=Path("/tmp/prag-latency"))
    parser.add_argument("--sizes", nargs="+", default=["demo", "370000"], help="demo and/or document counts")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--port", type=int, default=5077)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    demo = build_demo(args.home / "demo")
    saved = args.home / "serving_latency.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}
    for size in args.sizes:
        home = demo if size == "demo" else scaled_copy(demo, args.home / f"docs-{size}", int(size))
        results[size] = measure(demo, home, args.requests, args.port)
        print(size, results[size], flush=True)
        saved.write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"{'size':>9} {'documents':>10} {'startup s':>9} {'first s':>8} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} "
          f"{'RSS MB':>7}")  # fmt: skip
    for size, r in results.items():
        print(f"{size:>9} {r['documents']:>10,} {r['startup_s']:>9} {r['first_request_s']:>8} {r['p50_ms']:>7} "
              f"{r['p95_ms']:>7} {r['p99_ms']:>7} {r['peak_rss_mb']:>7}")  # fmt: skip


if __name__ == "__main__":
    main()
