"""Run bookkeeping that survives crashes: stale runs, held pool slots, the DuckDB lock, and one writer at a time.

A run whose process died (``kill -9``, OOM, a closed laptop) stays STARTED in Dagster's run storage and keeps its
slot of pool ``prag_duckdb``, so every later run would wait forever. Dagster's daemon (run monitoring, enabled in
dagster.yaml) marks such runs failed for runs it launched; runs started by ``prag materialize`` (the Dagster CLI,
no daemon) are checked here, at the next command: a STARTED/STARTING/CANCELING run whose worker process no longer
exists is reported failed and its pool slots are freed, both through Dagster's own instance APIs.

``prag materialize`` also holds an exclusive file lock on ``<home>/dagster/prag.lock`` for the whole run: a second
command waits on it (a blocking wait that uses no CPU, and says whom it waits for) instead of entering Dagster's
pool claim loop, which in this Dagster version re-polls without sleeping. The kernel releases the lock when the
holder dies, so a crash never leaves it behind. The same lock serialises the first initialisation of the Dagster
storage, which is not safe when two processes create it at once.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from prag_models.config.settings import Settings

ACTIVE = ("STARTING", "STARTED", "CANCELING")


@dataclass(frozen=True)
class StaleRun:
    """A run that Dagster believes active although its worker process is gone."""

    run_id: str
    status: str
    pid: int | None
    reason: str


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this pid runs on this machine (a zombie, dead but not yet reaped, does not)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _worker_pid(instance, run_id: str) -> int | None:  # noqa: ANN001 - DagsterInstance
    """The pid of the process that executes a run: the pid on its first engine or run-start event."""
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is not None and event.pid:
            return int(event.pid)
    return None


def stale_runs(instance, start_timeout_s: float = 300.0) -> list[StaleRun]:  # noqa: ANN001 - DagsterInstance
    """Active runs whose worker process no longer exists (or that never started within the timeout)."""
    from dagster import DagsterRunStatus, RunsFilter

    statuses = [DagsterRunStatus[s] for s in ACTIVE]
    out = []
    for record in instance.get_run_records(filters=RunsFilter(statuses=statuses)):
        run = record.dagster_run
        pid = _worker_pid(instance, run.run_id)
        if pid is not None and not pid_alive(pid):
            out.append(StaleRun(run.run_id, run.status.value, pid, f"worker process {pid} is gone"))
        elif pid is None and time.time() - record.create_timestamp.timestamp() > start_timeout_s:
            out.append(StaleRun(run.run_id, run.status.value, None, f"no worker after {start_timeout_s:.0f} s"))
    return out


def held_slots(instance) -> list[tuple[str, str, str]]:  # noqa: ANN001 - DagsterInstance
    """(pool, run id, step key) of every claimed concurrency slot."""
    storage = instance.event_log_storage
    out = []
    for key in sorted(storage.get_concurrency_keys()):
        out += [(key, s.run_id, s.step_key) for s in storage.get_concurrency_info(key).claimed_slots]
    return out


def release(instance, stale: list[StaleRun]) -> None:  # noqa: ANN001 - DagsterInstance
    """Mark each stale run failed and free its pool slots (Dagster's APIs; the run's own events stay)."""
    for s in stale:
        run = instance.get_run_by_id(s.run_id)
        if run is not None and run.status.value in ACTIVE:
            instance.report_run_failed(run, f"prag: marked failed, {s.reason}")
        instance.event_log_storage.free_concurrency_slots_for_run(s.run_id)


def orphan_slots(instance) -> list[tuple[str, str, str]]:  # noqa: ANN001 - DagsterInstance
    """Claimed slots whose run is no longer active (freed by ``release_orphans``)."""
    out = []
    for pool, run_id, step in held_slots(instance):
        run = instance.get_run_by_id(run_id)
        if run is None or run.status.value not in ACTIVE:
            out.append((pool, run_id, step))
    return out


def release_orphans(instance) -> int:  # noqa: ANN001 - DagsterInstance
    """Free the slots of runs that are no longer active; the number of runs concerned."""
    runs = {run_id for _, run_id, _ in orphan_slots(instance)}
    for run_id in runs:
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)
    return len(runs)


@contextmanager
def exclusive(lock_path: Path, what: str, log=print) -> Iterator[None]:  # noqa: ANN001 - a print-like callable
    """Hold an exclusive lock on lock_path; wait (blocking, no CPU) while another process holds it, saying so."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another prag process"
            log(f"[prag] waiting for {holder} to finish before {what} (lock {lock_path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} ({what}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)


def lock_state(lock_path: Path) -> str:
    """'free' or 'held by <holder>' for the prag lock (a dead holder's lock is free: the kernel released it)."""
    if not lock_path.exists():
        return "free"
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            return f"held by {handle.read().strip() or 'another process'}"
        fcntl.flock(handle, fcntl.LOCK_UN)
    return "free"


def lock_path(settings: Settings) -> Path:
    """The file lock that makes prag's Dagster commands one writer at a time."""
    return settings.home_path / "dagster" / "prag.lock"


def instance(settings: Settings, env: dict[str, str]):  # noqa: ANN201 - DagsterInstance, imported lazily
    """The Dagster instance of the prag home (its storage is created on first use: call under the lock)."""
    from dagster import DagsterInstance

    os.environ.update(env)
    return DagsterInstance.get()


def recover(settings: Settings, env: dict[str, str]) -> None:
    """Mark runs whose worker died as failed and free their pool slots, and the slots of finished runs; say so."""
    inst = instance(settings, env)
    stale = stale_runs(inst)
    for s in stale:
        print(f"[prag] run {s.run_id} was {s.status} but {s.reason}: marked failed, its pool slots freed", flush=True)
    release(inst, stale)
    freed = release_orphans(inst)
    if freed:
        print(f"[prag] freed the pool slots still held by {freed} finished run(s)", flush=True)


def run_doctor(settings: Settings, fix: bool, env: dict[str, str]) -> int:
    """Print the prag lock, the DuckDB lock holder, stale runs and held slots; with ``fix`` release them."""
    from prag_models.storage.store import DuckDBBusyError, connect

    lock = lock_path(settings)
    print(f"prag lock   : {lock_state(lock)} ({lock})")
    if settings.duckdb_path.exists():
        try:
            with connect(settings.duckdb_path, read_only=True, timeout_s=0.5):
                print(f"DuckDB file : free ({settings.duckdb_path})")
        except DuckDBBusyError as exc:
            print(f"DuckDB file : {exc}")
    with exclusive(lock, "prag doctor") if fix else nullcontext():
        inst = instance(settings, env)
        stale, slots, orphans = stale_runs(inst), held_slots(inst), orphan_slots(inst)
        print(f"stale runs  : {len(stale)}")
        for s in stale:
            print(f"  {s.run_id} {s.status}: {s.reason}")
        print(f"held slots  : {len(slots)} ({len(orphans)} of runs no longer active)")
        for pool, run_id, step in slots:
            print(f"  {pool}: run {run_id} step {step}")
        if fix:
            release(inst, stale)
            freed = release_orphans(inst)
            print(f"fixed       : {len(stale)} stale run(s) marked failed, slots of {freed} finished run(s) freed")
        elif stale or orphans:
            print("run `prag doctor --fix` to mark the stale runs failed and free their slots")
    return 0
