"""Shared helpers of the reliability tests: table checksums, `prag` subprocesses, LaMP folders derived from the demo."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
from conftest import cli_env

ROOT = Path(__file__).resolve().parents[2]


#: Columns that differ between two equal runs by nature: MLflow run ids, registry versions (also inside data_version,
#: which names the user encoder's version: a killed run may have registered one more) and times.
VOLATILE = {
    "cfrag_models": ("version", "run_id", "aliases", "data_version", "train_seconds", "local_path", "trained_at"),
    "generation_cache": ("created_at",),
    "llm_utility_plans": ("seconds_per_prompt",),  # the LLM's measured speed
}


def table_checksums(db: Path, exclude: dict[str, tuple[str, ...]] | None = None) -> dict[str, tuple[int, str]]:
    """(row count, sha256 of the rows in a canonical order) of every table in the DuckDB file, without the
    ``exclude`` columns of a table."""
    with duckdb.connect(str(db), read_only=True) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
        out = {}
        for table in tables:
            skip = (exclude or {}).get(table)
            columns = f"* EXCLUDE ({', '.join(skip)})" if skip else "*"
            rows = con.execute(f'SELECT {columns} FROM "{table}" ORDER BY ALL').fetchall()
            out[table] = (len(rows), hashlib.sha256(repr(rows).encode()).hexdigest())
        return out


def write_lamp_folder(root: Path, tasks: tuple[str, ...] = ("LaMP-2", "LaMP-3")) -> Path:
    """A small LaMP folder (LaMP_X_time/{train,dev}) written by the demo writer."""
    from prag_models.data.demo import write_demo

    write_demo(root, users=8, communities=2, dev_samples=3, tasks=list(tasks))
    return root


def copy_tree(src: Path, dst: Path) -> Path:
    """A fresh copy of a LaMP folder to corrupt."""
    shutil.copytree(src, dst)
    return dst


def prag_env(home: Path, config_text: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a `prag` subprocess on its own home: no inherited PRAG_/DAGSTER_ variable."""
    config = home.parent / f"{home.name}.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(config_text.format(home=home), encoding="utf-8")
    return cli_env(config, PRAG_HOME=str(home), **(extra or {}))


def start_prag(home: Path, config_text: str, *args: str, extra: dict[str, str] | None = None):
    """`prag <args>` in a new process group (a kill reaches the dagster child too), output to a log file."""
    log = home.parent / f"{home.name}-{args[0]}-{time.monotonic_ns()}.log"
    env = prag_env(home, config_text, extra)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prag_assets.cli", *args], cwd=ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
    return proc, log


def finish(started, expect: int | None = 0, timeout: float = 600) -> str:
    """Wait for a started `prag` command and return its output; assert its exit code when `expect` is given."""
    proc, log = started
    proc.wait(timeout=timeout)
    out = log.read_text(errors="replace")
    if expect is not None:
        assert proc.returncode == expect, f"exit {proc.returncode}, expected {expect}:\n{out[-4000:]}"
    return out
