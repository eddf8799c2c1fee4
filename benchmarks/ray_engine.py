"""The local engine against the Ray engine on the same task: wall time, per heavy stage, ratio, equal tables.

    python benchmarks/ray_engine.py [--tasks LaMP-2] [--users 48] [--dev-samples 16] [--llm-samples 8]
                                    [--generator llama_cpp|fake] [--actors 2] [--home DIR]

Each engine gets its own prag home with the same demo and settings and runs the same command, `prag materialize`
(every LaMP asset over the task range: the README's command), the Ray one with PRAG__COMPUTE__ENGINE=ray on a local
Ray cluster started inside the run (compute.ray_num_cpus = every core). The Ray actors get the local run's torch
thread count (compute.torch_threads), so that embeddings can be bit-identical. Prints the wall time of each run,
each heavy stage's step time from Dagster's log, the Ray / local ratios, and which tables differ (every table of
the DuckDB file, without run ids and times).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("document_embeddings", "query_embeddings", "feedback_labels", "pbr_lamp_retrievals", "generations")
#: Columns that differ between two equal runs by nature: MLflow run ids and versions, times.
VOLATILE = {
    "cfrag_models": ("version", "run_id", "aliases", "data_version", "train_seconds", "local_path", "trained_at"),
    "generation_cache": ("created_at",),
    "cluster_drift": ("run_id", "computed_at"),
    "cluster_models": ("fitted_at",),
    "cluster_state": ("fitted_at",),
    "cfrag_model_evaluations": ("recorded_at",),
}
_STEP = re.compile(r'Finished execution of step "([a-z_]+)" in ([0-9hms.]+)\.')
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3}


def _seconds(text: str) -> float:
    """Dagster's step duration ("2m38s", "9.73s", "140ms") in seconds."""
    return sum(float(v) * _UNITS[u] for v, u in re.findall(r"([0-9.]+)(ms|h|m|s)", text))


def _steps(log: str) -> dict[str, float]:
    """Seconds per step of a `prag materialize` log."""
    steps: dict[str, float] = {}
    for name, duration in _STEP.findall(log):
        steps[name] = steps.get(name, 0.0) + _seconds(duration)
    return steps


def _config(home: Path, args: argparse.Namespace, engine: str, torch_threads: int) -> Path:
    """The run's prag.toml: the demo size, the generator, the engine."""
    compute = f'engine = "{engine}"\nactors = {args.actors}\ntorch_threads = {torch_threads}\n'
    text = (
        f'home = "{home}"\n[data]\ntasks = {args.tasks!r}\ndemo_users = {args.users}\n'
        f"demo_dev_samples = {args.dev_samples}\nllm_eval_samples = {args.llm_samples}\n"
        f'[generator]\nbackend = "{args.generator}"\n[cfrag]\nmax_feedback_samples = {args.feedback_samples}\n'
        f"[compute]\n{compute}"
    ).replace("'", '"')
    path = home.parent / f"{home.name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _run(home: Path, config: Path) -> tuple[float, dict[str, float], int]:
    """`prag materialize` in a child process; (wall seconds, seconds per step, exit code)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRAG_", "DAGSTER_"))}
    env |= {"PRAG_CONFIG": str(config), "PRAG_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "prag_assets.cli", "materialize"], cwd=ROOT, env=env,
                          capture_output=True, text=True)  # fmt: skip
    seconds = time.perf_counter() - start
    log = proc.stdout + proc.stderr + f"\n[bench] wall {seconds:.1f} s, exit {proc.returncode}\n"
    (home.parent / f"{home.name}.log").write_text(log, encoding="utf-8")
    return seconds, _steps(log), proc.returncode


def _reused(home: Path) -> tuple[float, dict[str, float], int] | None:
    """A finished run's (wall seconds, steps, exit code) from its log (--reuse)."""
    path = home.parent / f"{home.name}.log"
    found = re.search(r"\[bench\] wall ([0-9.]+) s, exit (-?[0-9]+)", path.read_text()) if path.exists() else None
    return (float(found.group(1)), _steps(path.read_text()), int(found.group(2))) if found else None


def _checksums(db: Path) -> dict[str, str]:
    """sha256 of every table's rows in a canonical order, without the volatile columns."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
        out = {}
        for table in tables:
            skip = VOLATILE.get(table)
            columns = f"* EXCLUDE ({', '.join(skip)})" if skip else "*"
            rows = con.execute(f'SELECT {columns} FROM "{table}" ORDER BY ALL').fetchall()
            out[table] = hashlib.sha256(repr(rows).encode()).hexdigest()
        return out


def main() -> None:
    """Run both engines and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["LaMP-2"])
    parser.add_argument("--users", type=int, default=48)
    parser.add_argument("--dev-samples", type=int, default=16)
    parser.add_argument("--llm-samples", type=int, default=8)
    parser.add_argument("--feedback-samples", type=int, default=8)
    parser.add_argument("--generator", default="llama_cpp", choices=["llama_cpp", "fake"])
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--home", type=Path, help="folder for the two homes (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="report the runs already in --home instead of rerunning")
    args = parser.parse_args()
    import torch

    root = args.home or Path(tempfile.mkdtemp(prefix="prag-ray-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    size = f"{args.users} users, {args.dev_samples} dev samples ({args.llm_samples} with an LLM)"
    print(f"[bench] {root}; tasks {args.tasks}, {size}, generator {args.generator}, {os.cpu_count()} cores", flush=True)
    results = {}
    for engine in ("local", "ray"):
        home = root / engine
        config = _config(home, args, engine, torch.get_num_threads())
        results[engine] = (_reused(home) if args.reuse else None) or _run(home, config)
        print(f"[bench] {engine}: {results[engine][0]:.1f} s, exit {results[engine][2]}", flush=True)
    if any(code for _, _, code in results.values()):
        sys.exit(f"a run failed: see {root}/<engine>.log")
    (local_s, local_steps, _), (ray_s, ray_steps, _) = results["local"], results["ray"]
    print(f"\n{'stage':<22} {'local s':>8} {'ray s':>8} {'ray/local':>10}")
    for name in HEAVY:
        a, b = local_steps.get(name, 0.0), ray_steps.get(name, 0.0)
        print(f"{name:<22} {a:8.1f} {b:8.1f} {b / a if a else float('nan'):10.2f}")
    a, b = sum(local_steps.get(n, 0.0) for n in HEAVY), sum(ray_steps.get(n, 0.0) for n in HEAVY)
    print(f"{'heavy stages':<22} {a:8.1f} {b:8.1f} {b / a:10.2f}")
    print(f"{'whole run (wall)':<22} {local_s:8.1f} {ray_s:8.1f} {ray_s / local_s:10.2f}")
    local_t, ray_t = _checksums(root / "local" / "prag.duckdb"), _checksums(root / "ray" / "prag.duckdb")
    differing = sorted(t for t in set(local_t) | set(ray_t) if local_t.get(t) != ray_t.get(t))
    print(f"\ntables: {len(local_t)} local, {len(ray_t)} ray; equal: {len(local_t) - len(differing)}; "
          f"differing: {differing or 'none'}")  # fmt: skip


if __name__ == "__main__":
    main()
