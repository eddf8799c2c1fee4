"""A run of `prag materialize` as a person follows it: the child process's output goes to a log file under the home
(and to the terminal with --verbose), its stages are printed as they finish (run_progress.RunWatcher), and at the end
the time per stage (adding up to the wall time), where to look next, and the verdict."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from prag_assets.cli.run_progress import RunSummary, RunWatcher, clock
from prag_models.config.settings import Settings

#: Stages listed by name in the closing table; the rest are summed on one line.
SHOWN_STAGES = 12
#: Width the prose lines wrap at (a path longer than that stays whole).
WIDTH = 100


def say(text: str) -> None:
    """Print one message as "[prag] ..." lines wrapped at WIDTH columns."""
    import textwrap

    print("\n".join(textwrap.wrap(text, WIDTH, initial_indent="[prag] ", subsequent_indent="[prag]   ",
                                   break_long_words=False, break_on_hyphens=False)), flush=True)  # fmt: skip


def watch(settings: Settings, cmd: list[str], env: dict[str, str], log: Path, token: str, tasks: list[str],
          verbose: bool, started: float) -> tuple[int, RunSummary]:  # fmt: skip
    """Run the child process to its end while printing its stages; (exit code, what ran)."""
    from prag_assets.cli import doctor

    log.parent.mkdir(parents=True, exist_ok=True)
    watcher = RunWatcher(doctor.instance(settings, env), token, tasks, started=started)
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if verbose else out, stderr=subprocess.STDOUT,
                                text=verbose)  # fmt: skip
        copier = threading.Thread(target=_tee, args=(proc.stdout, out), daemon=True) if verbose else None
        if copier:
            copier.start()
        try:
            while proc.poll() is None:
                _poll(watcher)
                time.sleep(1.0)
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
        if copier:
            copier.join(timeout=10)
    _poll(watcher)
    if proc.returncode and not watcher.summary.failures and not verbose:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        print("[prag] the run failed; the end of its log:\n" + "\n".join(f"    {line}" for line in tail), flush=True)
    return proc.returncode, watcher.summary


def _tee(stream, out) -> None:  # noqa: ANN001 - text streams
    """Copy the child's output to the terminal and the log file (--verbose)."""
    for line in stream:
        sys.stdout.write(line)
        out.write(line)
    sys.stdout.flush()


def _poll(watcher: RunWatcher) -> None:
    """Follow the run; a busy event-log store is read again on the next poll."""
    try:
        watcher.poll()
    except Exception as exc:  # noqa: BLE001 - the progress display must never stop the run
        if "locked" not in str(exc) and "busy" not in str(exc):
            print(f"[prag] (progress display: {type(exc).__name__}: {exc})", flush=True)


def stage_table(summaries: list[RunSummary], wall: float) -> list[str]:
    """The time per stage, largest first (the smaller ones summed on one line), the checks, the start-up and the
    time between stages, adding up to the wall time."""
    stages = sorted(((n, s) for summary in summaries for n, s in summary.stages), key=lambda x: -x[1])
    checks = sum(s.checks for s in summaries)
    check_seconds = sum(s.check_seconds for s in summaries)
    lines = [f"[prag] time per stage, {clock(wall)} in all:"]
    lines += [f"  {name:<40} {seconds:8.1f} s" for name, seconds in stages[:SHOWN_STAGES]]
    rest = stages[SHOWN_STAGES:]
    if rest:
        lines.append(f"  {f'{len(rest)} other stages':<40} {sum(s for _, s in rest):8.1f} s")
    lines.append(f"  {f'asset checks ({checks} evaluations)':<40} {check_seconds:8.1f} s")
    other = wall - sum(s for _, s in stages) - check_seconds
    lines.append(f"  {'start-up, loading, between stages':<40} {other:8.1f} s")
    lines.append(f"  {'total (wall time)':<40} {wall:8.1f} s")
    return lines


def print_summary(settings: Settings, summaries: list[RunSummary], wall: float, code: int, verdict: bool) -> None:
    """The closing lines: time per stage, failures, where to look next, and (after a whole-graph run) the verdict."""
    lines = ["", *stage_table(summaries, wall)]
    failures = [f for s in summaries for f in s.failures] + [f"check {c}" for s in summaries for c in s.checks_failed]
    if code or failures:
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        lines.append(f"[prag] the run FAILED (exit code {code}): " + ("; ".join(failures[:5]) + more or "see the log"))
    if not code:
        lines += [f"[prag] {line}" for line in set_aside_note(settings)]
    lines += [
        "[prag] next: `prag report` (every table with its intervals, the seeds' claims)",
        "[prag]       scripts/ui.sh (Dagster UI: runs, event logs, lineage)",
        f"[prag]       logs: {settings.home_path / 'dagster' / 'logs'}",
        f"[prag]       tables: {settings.duckdb_path}",
    ]
    print("\n".join(lines), flush=True)
    if verdict and not code:
        print("\n" + verdict_text(settings), flush=True)


def verdict_text(settings: Settings) -> str:
    """The verdict's deciding columns for the configured tasks (prag_models.evaluation.verdict_view), read from the
    store, at most 100 columns wide: the last thing the run prints; every column is in `prag report`."""
    from prag_models.evaluation.verdict import verdicts_for
    from prag_models.evaluation.verdict_view import deciding_text
    from prag_models.storage.store import DuckDBBusyError, read_connection

    try:
        with read_connection(settings.duckdb_path) as (con, _):
            table = verdicts_for(con, settings)
    except (FileNotFoundError, DuckDBBusyError) as exc:
        return f"[prag] no verdict: {exc}"
    table = table[table["task"].isin(list(settings.data.tasks))] if len(table) else table
    title = ("## Verdict: the best personalized method against non-personalized retrieval (dense_global)\n"
             "(Holm across tasks, held-out values, the own profile, samples for 80 % power: `prag report`)")
    return f"{title}\n\n{deciding_text(table)}"


def set_aside_note(settings: Settings) -> list[str]:
    """One line per configured task with malformed records set aside (data.malformed), read from the store."""
    from prag_models.data.set_aside import set_aside_lines
    from prag_models.storage.store import DuckDBBusyError, read_connection

    try:
        with read_connection(settings.duckdb_path) as (con, _):
            return set_aside_lines(con, list(settings.data.tasks))
    except (FileNotFoundError, DuckDBBusyError):
        return []
