"""Nothing lost, nothing stuck: a real `prag materialize` killed at several points (SIGKILL of the whole command, and
the PRAG_FAULT switch: exit = what kill -9 does to the step's process, raise = a step failure) and then run again
completes unattended with the same tables as an uninterrupted run; a killed table write leaves the previous version;
readers hammering the file never fail the run; two first runs on a fresh home both succeed.

The graph is cut to the CFRAG retriever (``--select *cfrag_retriever``: data, embeddings, user encoder, feedback
labels, retriever training) on a tiny demo with the fake generator, so that the whole file runs in a few minutes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from prag_models.storage.store import connect
from reliability.helpers import ROOT, VOLATILE, finish, prag_env, start_prag, table_checksums

SELECT = "*cfrag_retriever"
CONFIG = """home = "{home}"
[data]
demo_users = 16
demo_communities = 2
demo_dev_samples = 4
tasks = ["LaMP-2"]
llm_eval_samples = 2
[generator]
backend = "fake"
[retrieval]
k = 2
[clustering]
similar_users = 2
[cfrag]
epochs = 2
max_feedback_samples = 4
train_epochs = 2
"""


def _materialize(home: Path, fault: str | None = None, select: str = SELECT):
    """Start `prag materialize --select <select>` on a home, with PRAG_FAULT armed when given."""
    extra = {"PRAG_FAULT": fault} if fault else None
    return start_prag(home, CONFIG, "materialize", "--verbose", "--select", select, extra=extra)  # the event log too


def _tables(home: Path) -> dict[str, tuple[int, str]]:
    return table_checksums(home / "prag.duckdb", VOLATILE)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """The tables of an uninterrupted run."""
    home = tmp_path_factory.mktemp("clean") / "home"
    finish(_materialize(home))
    tables = _tables(home)
    assert {"document_embeddings", "feedback_labels", "cfrag_models"} <= set(tables)
    return tables


class Readers:
    """Readers hammering the DuckDB file during a run: read-only opens through prag's store helper in a loop, and
    `prag report` one after another."""

    def __init__(self, home: Path) -> None:
        self.db, self.env = home / "prag.duckdb", prag_env(home, CONFIG)
        self.stop, self.reads, self.errors, self.reports = threading.Event(), 0, [], []
        self.threads = [threading.Thread(target=self._read), threading.Thread(target=self._report)]

    def _read(self) -> None:
        while not self.stop.wait(0.02):  # about 30 opens a second, leaving the run its CPU
            try:
                with connect(self.db, read_only=True, timeout_s=60) as con:
                    con.execute("SELECT count(*) FROM lamp_samples").fetchone()
                self.reads += 1
            except Exception as exc:  # noqa: BLE001 - every failure of a reader is reported by the test
                self.errors.append(repr(exc))

    def _report(self) -> None:
        while not self.stop.wait(3.0):  # a report process costs a core for a second: leave the run its CPU
            cmd = [sys.executable, "-m", "prag_assets.cli", "report"]
            done = subprocess.run(cmd, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120)
            self.reports.append((done.returncode, done.stdout + done.stderr))

    def __enter__(self) -> Readers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=180)


def _sigkill_at(started, step: str) -> None:
    """SIGKILL the whole command (prag and its dagster child) as soon as the step has started."""
    proc, log = started
    deadline = time.monotonic() + 300
    while f'Started execution of step "{step}"' not in log.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_kills_at_several_points_then_one_unattended_run_recovers(tmp_path: Path, clean: dict) -> None:
    """Raise (an ordinary step failure) after the first embedding chunk, SIGKILL during embedding, exit during
    training, exit inside a table write's transaction; then one plain run with readers hammering the file."""
    home = tmp_path / "home"

    out = finish(_materialize(home, "embedding_chunk:raise"), expect=1)  # on the fresh home: nothing cached before
    assert "InjectedFault" in out and "injected fault at embedding_chunk (raise)" in out
    assert _embedding_cache_rows(home) > 0  # the finished chunk was committed before the fault

    _sigkill_at(_materialize(home), "document_embeddings")
    doctor = finish(start_prag(home, CONFIG, "doctor"))
    assert "stale runs  : 1" in doctor and "prag lock   : free" in doctor, doctor  # the kernel dropped the lock

    out = finish(_materialize(home, "training_epoch:exit"), expect=137)
    assert "marked failed, its pool slots freed" in out  # the killed run, released unattended
    assert "injected fault at training_epoch (exit)" in out

    before = _tables(home)
    assert before["document_embeddings"][0] > 0
    out = finish(_materialize(home, "table_write@document_embeddings:exit"), expect=137)
    assert "injected fault at table_write ['document_embeddings'] (exit)" in out
    assert _tables(home) == before  # killed inside the transaction: every table is the previous version

    with Readers(home) as readers:
        out = finish(_materialize(home))
    assert "marked failed, its pool slots freed" in out and "waiting for" not in out
    assert _tables(home) == clean
    assert readers.reads > 0 and not readers.errors, readers.errors[:3]
    # `prag report` read the file between steps (1: this selection has no evaluation table yet) or, while a step held
    # it and no run had published a snapshot yet, stopped with a message naming the writer (3); it never crashed
    assert readers.reports and all(code in (0, 1, 3) for code, _ in readers.reports), readers.reports[:3]
    assert all("locked by" in text for code, text in readers.reports if code == 3), readers.reports
    assert not any("Traceback" in text for _, text in readers.reports)
    doctor = finish(start_prag(home, CONFIG, "doctor"))
    assert "stale runs  : 0" in doctor and "prag lock   : free" in doctor, doctor


def _embedding_cache_rows(home: Path) -> int:
    """Rows of the embedding cache (0 before the table exists)."""
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        exists = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'embedding_cache'").fetchone()[0]
        return con.execute("SELECT count(*) FROM embedding_cache").fetchone()[0] if exists else 0


def test_two_first_runs_on_a_fresh_home_both_succeed(tmp_path: Path, clean: dict) -> None:
    """Two commands at once on a fresh home: one initialises the Dagster storage, the other waits on the lock."""
    home = tmp_path / "home"
    first = _materialize(home, select="lamp_samples")
    time.sleep(0.3)
    second = _materialize(home, select="lamp_samples")
    outputs = finish(first) + finish(second)
    assert "waiting for pid" in outputs  # the second one waited on the lock, it did not spin or fail
    assert _tables(home)["lamp_samples"] == clean["lamp_samples"]
