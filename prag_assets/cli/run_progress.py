"""What `prag materialize` prints while its run goes: one line per finished stage (asset step) with its time, a
progress line with an estimate of the time left for long stages, failures with their message; the asset checks are
counted, not listed. Read from the run's event log in the Dagster instance (the full log stays there, in the UI, and
in the run's log file)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: "what: done/total ..." progress messages of the stages (prag_assets.metadata.progress_logger, the feedback loop)
_PROGRESS = re.compile(r"^(?P<what>[^{}:]{1,80}): (?P<done>\d+)/(?P<total>\d+)\b")
_TASK = re.compile(r"^(LaMP-\d)\b")
#: Failed checks printed as they come; later ones are only counted (the closing summary names the first few).
SHOWN_CHECK_FAILURES = 3
#: After this many "... running for" lines the interval between them grows by progress_every each time (a slow
#: machine's hour-long run stays a screenful: about 15 lines in the first 15 minutes, 7 in the next 15, ...).
PROGRESS_LINES_PER_STEP = 15


def clock(seconds: float) -> str:
    """m:ss (h:mm:ss from an hour on)."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@dataclass
class _Step:
    start: float
    asset: bool = False
    check: bool = False
    last_print: float = 0.0
    parts: dict[str, tuple[float, int]] = field(default_factory=dict)  # what -> (first seen, done then)
    latest: tuple[str, int, int, float] | None = None  # what, done, total, when


@dataclass
class RunSummary:
    """The stages of one run with their seconds, the checks, the failures."""

    stages: list[tuple[str, float]] = field(default_factory=list)
    checks: int = 0
    checks_failed: list[str] = field(default_factory=list)
    check_seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    skipped: int = 0
    run_id: str = ""


def failure_cause(error: Any) -> str:
    """One line saying why a step failed: the innermost error of a Dagster wrapper chain (a user code error's
    ``cause``, e.g. prag's LampDataError naming the file, record, field and what was expected), its exception class
    without the module path, the message's lines joined; "?" without an error."""
    if error is None:
        return "?"
    chain = [error]
    while chain[-1].cause is not None and len(chain) < 20:
        chain.append(chain[-1].cause)
    own = [e for e in chain if not _is_dagster(e)]
    cause = own[0] if own else chain[-1]
    text = " ".join(part.strip() for part in str(cause.message).strip().splitlines() if part.strip())
    name = str(getattr(cause, "cls_name", "") or "")
    if name and text.startswith(f"{name}:"):  # "LampRecordError: <file>: <record>: ..."
        return text
    qualified = re.match(r"^[\w.]+\.(\w+): ", text)  # "prag_models.data.tasks.LampDataError: ..." -> its class name
    return text[qualified.start(1):] if qualified else text or name or "?"


def _is_dagster(error: Any) -> bool:
    """An error Dagster raises around user code (DagsterExecutionStepExecutionError and kin), not its cause."""
    name = str(getattr(error, "cls_name", "") or "")
    return name.startswith("Dagster") or "dagster._core.errors." in str(error.message).split(":", 1)[0]


class RunWatcher:
    """Follows the run tagged ``prag/launch=<token>`` in a Dagster instance and prints its stages as they finish."""

    def __init__(self, instance: Any, token: str, tasks: list[str], out: Callable[[str], None] = print,
                 progress_every: float = 60.0, started: float | None = None) -> None:  # fmt: skip
        self.instance, self.token, self.tasks, self.out = instance, token, tasks, out
        self.progress_every = progress_every
        self.started = time.time() if started is None else started
        self.summary, self.cursor, self.steps, self.planned = RunSummary(), None, {}, 0
        self.done = 0
        self.progress_lines, self.last_progress = 0, float("-inf")  # "... running for" lines of the whole run

    def _find_run(self) -> bool:
        """The run's id once the child process has created it."""
        from dagster import RunsFilter

        if self.summary.run_id:
            return True
        runs = self.instance.get_runs(filters=RunsFilter(tags={"prag/launch": self.token}), limit=1)
        if not runs:
            return False
        run = runs[0]
        self.summary.run_id = run.run_id
        if run.execution_plan_snapshot_id:
            plan = self.instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
            self.planned = len(plan.steps)
        self.out(f"[prag] run {run.run_id[:8]}: {self.planned} steps (stages and their checks); Dagster UI: "
                 "scripts/ui.sh")  # fmt: skip
        return True

    def poll(self) -> None:
        """Read the new events, print finished stages and, for long ones, progress with the time left."""
        if not self._find_run():
            return
        while True:
            conn = self.instance.get_records_for_run(self.summary.run_id, cursor=self.cursor, limit=1000)
            self.cursor = conn.cursor
            for record in conn.records:
                self._handle(record.event_log_entry)
            if not conn.has_more:
                break
        self._progress(time.time())

    def _handle(self, entry: Any) -> None:
        """One event of the run."""
        event, step = entry.dagster_event, entry.step_key
        if event is None:
            if step in self.steps and entry.user_message:
                self._note_progress(self.steps[step], entry.user_message, entry.timestamp)
            return
        kind = event.event_type_value
        if kind == "STEP_START":
            self.steps[step] = _Step(entry.timestamp, last_print=entry.timestamp)
        elif kind == "ASSET_MATERIALIZATION" and step in self.steps:
            self.steps[step].asset = True
        elif kind == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data
            if step in self.steps:
                self.steps[step].check = True
            self.summary.checks += 1
            if not data.passed:
                name = f"{data.asset_check_key.asset_key.to_user_string()}:{data.check_name}"
                self.summary.checks_failed.append(name)
                if len(self.summary.checks_failed) <= SHOWN_CHECK_FAILURES:
                    self.out(f"[prag]   check failed: {name}")
                elif len(self.summary.checks_failed) == SHOWN_CHECK_FAILURES + 1:
                    self.out("[prag]   (more checks failed: counted, named in the closing summary and the UI)")
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE") and step in self.steps:
            self._finished(step, entry.timestamp, event if kind == "STEP_FAILURE" else None)
        elif kind == "STEP_SKIPPED":
            self.summary.skipped += 1

    def _finished(self, step: str, when: float, failure: Any) -> None:
        """A step ended: a stage line (or the checks' tally), a failure with its message."""
        info, self.done = self.steps.pop(step), self.done + 1
        seconds = when - info.start
        if failure is not None:
            message = failure_cause(failure.step_failure_data.error if failure.step_failure_data else None)
            self.summary.failures.append(f"{step}: {message}")
            self.out(f"[prag] {clock(when - self.started):>6}  FAILED {step} after {seconds:.1f} s: {message}")
            return
        if info.check and not info.asset:
            self.summary.check_seconds += seconds
            return
        self.summary.stages.append((step, seconds))
        self.out(f"[prag] {clock(when - self.started):>6}  {step:<34} {seconds:8.1f} s   ({self.done}/{self.planned} "
                 "steps)")  # fmt: skip

    def _note_progress(self, info: _Step, message: str, when: float) -> None:
        """Remember a stage's latest "what: done/total" message and where that part started."""
        m = _PROGRESS.match(message)
        if not m:
            return
        what, done, total = m["what"].strip(), int(m["done"]), int(m["total"])
        info.parts.setdefault(what, (when, done))
        info.latest = (what, done, total, when)

    def _progress(self, now: float) -> None:
        """A line for the stage (of those running) whose last line is oldest, once it has run progress_every seconds
        since then; at most one such line a progress_every in the whole run, the interval growing after
        PROGRESS_LINES_PER_STEP lines."""
        interval = self.progress_every * (1 + self.progress_lines // PROGRESS_LINES_PER_STEP)
        if now - self.last_progress < interval:
            return
        due = [(info.last_print, step) for step, info in self.steps.items()
               if not (info.check and not info.asset) and now - info.last_print >= interval]  # fmt: skip
        if not due:
            return
        step = min(due)[1]
        info = self.steps[step]
        info.last_print = self.last_progress = now
        self.progress_lines += 1
        line = f"[prag] {clock(now - self.started):>6}  ... {step} running for {clock(now - info.start)}"
        if info.latest:
            what, done, total, _ = info.latest
            line += f": {what} {done}/{total}"
            left = self._time_left(info, now)
            if left is not None:
                line += f", about {clock(left)} left"
        self.out(line)

    def _time_left(self, info: _Step, now: float) -> float | None:
        """Seconds left: the current part at its own rate, then each later task of the run at the stage's mean time
        per task so far (tasks are taken in order)."""
        what, done, total, _ = info.latest
        since, done0 = info.parts[what]
        if done <= done0 or total <= 0:
            return None
        part = (now - since) * (total - done) / (done - done0)
        task = _TASK.match(what)
        if not task or task[1] not in self.tasks:
            return part
        index = self.tasks.index(task[1])
        per_task = (now - info.start) / (index + done / total)
        return part + (len(self.tasks) - index - 1) * per_task
