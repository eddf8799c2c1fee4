"""The progress lines of `prag materialize` (prag_assets/cli/run_progress.py) from a run's events: a line per finished
stage, checks counted not listed, and for a long stage its latest progress with the time left."""

from __future__ import annotations

from types import SimpleNamespace as NS

from prag_assets.cli.run_progress import RunWatcher, clock


def _event(kind: str, step: str | None, when: float, **data):
    """A stand-in for an EventLogEntry (a Dagster event, or a log message when kind is "")."""
    event = NS(event_type_value=kind, event_specific_data=NS(**data), step_failure_data=data.get("failure")) if kind \
        else None  # fmt: skip
    return NS(dagster_event=event, step_key=step, timestamp=when, user_message=data.get("message", ""))


def test_stage_lines_checks_and_time_left() -> None:
    lines: list[str] = []
    watcher = RunWatcher(None, "token", ["LaMP-1", "LaMP-2"], out=lines.append, progress_every=60.0, started=0.0)
    watcher.planned = 3
    for entry in [_event("STEP_START", "feedback_labels", 10.0),
                  _event("", "feedback_labels", 10.0, message="LaMP-1 feedback: 0/100 labels exist, 100 to generate"),
                  _event("", "feedback_labels", 20.0, message="LaMP-1 feedback: 10/100 new labels (1.00 labels/s)"),
                  _event("", "feedback_labels", 60.0, message="LaMP-1 feedback: 50/100 new labels (1.00 labels/s)")]:
        watcher._handle(entry)  # noqa: SLF001 - feeding events without an instance
    watcher._progress(75.0)  # noqa: SLF001
    # the part: 50 labels in 65 s since its first message, 50 left -> 65 s; then LaMP-2 at the stage's mean per task
    # so far (65 s for half a task)
    assert lines == [f"[prag] {clock(75):>6}  ... feedback_labels running for 1:05: LaMP-1 feedback 50/100, about "
                     f"{clock(65 + 130)} left"]  # fmt: skip
    watcher._progress(80.0)  # noqa: SLF001 - not again within a minute
    assert len(lines) == 1
    check = {"passed": True, "asset_check_key": None, "check_name": "ok"}
    for entry in [_event("STEP_SUCCESS", "feedback_labels", 100.0), _event("STEP_START", "x_check", 100.0),
                  _event("ASSET_CHECK_EVALUATION", "x_check", 101.0, **check),
                  _event("STEP_SUCCESS", "x_check", 102.0)]:
        watcher._handle(entry)  # noqa: SLF001
    assert lines[1].split() == ["[prag]", "1:40", "feedback_labels", "90.0", "s", "(1/3", "steps)"]
    assert len(lines) == 2 and watcher.summary.checks == 1 and watcher.summary.check_seconds == 2.0
    assert watcher.summary.stages == [("feedback_labels", 90.0)]


def test_a_failure_says_its_cause_not_dagsters_wrapper() -> None:
    """The FAILED line and the closing line carry the user code error under Dagster's wrapper, on one line."""
    from prag_assets.cli.run_progress import failure_cause

    cause = NS(cls_name="LampRecordError", cause=None,
               message="prag_models.data.lamp_validation.LampRecordError: /d/dev_questions.json: record id 'd1': "
                       "field 'profile doc 'd1-2'.tag': 'Comedy' is not a LaMP-2 label ['comedy']\n")  # fmt: skip
    wrapper = NS(cls_name="DagsterExecutionStepExecutionError", cause=cause,
                 message='dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred while executing op '
                         '"lamp_samples":\n')  # fmt: skip
    expected = ("LampRecordError: /d/dev_questions.json: record id 'd1': field 'profile doc 'd1-2'.tag': 'Comedy' is "
                "not a LaMP-2 label ['comedy']")  # fmt: skip
    assert failure_cause(wrapper) == expected
    assert failure_cause(NS(cls_name="ValueError", cause=None, message="ValueError: two\nlines\n")) == \
        "ValueError: two lines"  # fmt: skip
    assert failure_cause(None) == "?"
    lines: list[str] = []
    watcher = RunWatcher(None, "token", ["LaMP-2"], out=lines.append, started=0.0)
    watcher._handle(_event("STEP_START", "lamp_samples", 1.0))  # noqa: SLF001
    watcher._handle(_event("STEP_FAILURE", "lamp_samples", 2.0, failure=NS(error=wrapper)))  # noqa: SLF001
    assert lines == [f"[prag]   0:02  FAILED lamp_samples after 1.0 s: {expected}"]
    assert watcher.summary.failures == [f"lamp_samples: {expected}"]


def test_progress_lines_once_a_minute_in_the_whole_run_then_sparser() -> None:
    """Two long stages at once still make one "... running for" line a minute; after PROGRESS_LINES_PER_STEP lines
    the interval grows, so that a slow machine's long run stays a screenful."""
    from prag_assets.cli.run_progress import PROGRESS_LINES_PER_STEP

    lines: list[str] = []
    watcher = RunWatcher(None, "token", ["LaMP-1"], out=lines.append, progress_every=60.0, started=0.0)
    for step in ("document_embeddings", "cfrag_user_encoder"):
        watcher._handle(_event("STEP_START", step, 0.0))  # noqa: SLF001
    for now in range(0, 3601, 5):  # an hour, polled every 5 s
        watcher._progress(float(now))  # noqa: SLF001
    assert all("running for" in ln for ln in lines)
    minutes = [sum(int(x) * 60**i for i, x in enumerate(reversed(ln.split()[1].split(":")))) // 60 for ln in lines]
    assert len(set(minutes)) == len(minutes)  # never two lines in the same minute
    assert minutes[:PROGRESS_LINES_PER_STEP] == list(range(1, PROGRESS_LINES_PER_STEP + 1))
    assert len(lines) <= 35, len(lines)  # 60 once a minute
    assert {ln.split()[3] for ln in lines} == {"document_embeddings", "cfrag_user_encoder"}  # in turn


def test_failed_checks_are_named_a_few_then_counted() -> None:
    from prag_assets.cli.run_progress import SHOWN_CHECK_FAILURES

    lines: list[str] = []
    watcher = RunWatcher(None, "token", ["LaMP-1"], out=lines.append, started=0.0)
    key = NS(asset_key=NS(to_user_string=lambda: "lamp_samples"))
    for i in range(10):
        data = {"passed": False, "asset_check_key": key, "check_name": f"c{i}"}
        watcher._handle(_event("ASSET_CHECK_EVALUATION", None, 1.0, **data))  # noqa: SLF001
    assert len(lines) == SHOWN_CHECK_FAILURES + 1 and len(watcher.summary.checks_failed) == 10
