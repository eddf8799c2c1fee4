"""A `prag materialize` killed with SIGKILL leaves nothing stuck: the next run recovers unattended and ends with the
same tables as an uninterrupted run; two first runs on a fresh home both succeed."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from conftest import ROOT

TABLES = (
    "lamp_samples", "profile_documents", "document_embeddings", "user_clusters", "similar_users",
    "baseline_retrievals", "clusterrag_retrievals", "cfrag_retrievals", "generations", "lamp_evaluation",
    "lamp_retrieval_evaluation",
)  # fmt: skip
CONFIG = """home = "{home}"
[data]
demo_users = 24
demo_communities = 3
demo_dev_samples = 8
tasks = ["LaMP-2"]
llm_eval_samples = 4
[generator]
backend = "fake"
[retrieval]
k = 2
"""


def _env(home: Path) -> dict[str, str]:
    config = home.parent / f"{home.name}.toml"
    config.write_text(CONFIG.format(home=home), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRAG_", "DAGSTER_"))}
    return env | {"PRAG_CONFIG": str(config), "PRAG_HOME": str(home), "HF_HUB_OFFLINE": "1"}


def _prag(home: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """`prag <args>` in a new process group (so that a kill reaches the dagster child too), output to a log file."""
    home.parent.mkdir(parents=True, exist_ok=True)
    log = home.parent / f"{home.name}-{args[0]}-{time.monotonic_ns()}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prag_assets.cli", *args], cwd=ROOT, env=_env(home), stdout=out,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
    return proc, log


def _finish(started: tuple[subprocess.Popen, Path], timeout: float = 600) -> str:
    proc, log = started
    proc.wait(timeout=timeout)
    out = log.read_text(errors="replace")
    assert proc.returncode == 0, out[-3000:]
    return out


def _checksums(home: Path) -> dict[str, str]:
    """A hash of every compared table's rows in a canonical order."""
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        out = {}
        for table in TABLES:
            rows = con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
            out[table] = hashlib.sha256(repr(rows).encode()).hexdigest()
        return out


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The tables of an uninterrupted run."""
    home = tmp_path_factory.mktemp("clean") / "home"
    _finish(_prag(home, "materialize"))
    return _checksums(home)


@pytest.mark.parametrize("step", ["document_embeddings", "cfrag_reranker"])
def test_kill_9_mid_run_then_the_next_run_recovers_unattended(tmp_path: Path, clean: dict[str, str], step: str) -> None:
    """SIGKILL while a step runs (embedding, training); the next `prag materialize` needs no manual help."""
    home = tmp_path / "home"
    proc, log = _prag(home, "materialize")
    marker = f'Started execution of step "{step}"'
    deadline = time.monotonic() + 300
    while marker not in log.read_text(errors="replace") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, f"the run ended before step {step} started"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    doctor = _finish(_prag(home, "doctor"))
    assert "stale runs  : 1" in doctor and "prag lock   : free" in doctor, doctor
    second = _finish(_prag(home, "materialize"))
    assert "marked failed, its pool slots freed" in second
    assert _checksums(home) == clean
    assert "stale runs  : 0" in _finish(_prag(home, "doctor"))


def test_two_first_runs_on_a_fresh_home_both_succeed(tmp_path: Path, clean: dict[str, str]) -> None:
    home = tmp_path / "home"
    a = _prag(home, "materialize")
    time.sleep(0.3)
    b = _prag(home.parent / home.name, "materialize")
    out_a, out_b = _finish(a), _finish(b)
    assert "waiting for pid" in out_a + out_b  # the second one waited on the lock, it did not spin or fail
    assert _checksums(home) == clean
