"""The `prag` command: materialize the graph, print the evaluation table, promote/roll back CFRAG models, answer."""

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

from prag_assets.cli import doctor, run_summary
from prag_assets.cli.budget import EvidenceHelpers, add_evidence_command, child_env, deferred_note, sized_settings
from prag_assets.cli.doctor import exclusive
from prag_assets.cli.forget import add_forget_command
from prag_assets.cli.lifecycle import LifecycleHelpers, add_lifecycle_command
from prag_assets.cli.relocate import add_relocate_command
from prag_assets.cli.sql import add_sql_command
from prag_models.config.settings import ALL_TASKS, PROJECT_ROOT, Settings, load_settings

#: Asset group of the real-data retrieval evaluation (prag_assets/assets/pbr_eval.py), run in its own run.
RETRIEVAL_EVAL_GROUP = "retrieval_eval"
#: The job the history sensor launches (prag_assets/automation/sensors.py), also `prag ingest --apply`'s.
INCREMENTAL_JOB = "incremental_update_job"


def _materialize(args: argparse.Namespace) -> int:
    """Materialize the graph for the configured tasks in one run (models load once), printing one line per stage."""
    settings = load_settings()
    tasks = [t for t in ALL_TASKS if t in settings.data.tasks]
    if not tasks:
        print("no tasks configured (data.tasks)", file=sys.stderr)
        return 2
    # The default selection runs the task-partitioned LaMP graph here and the unpartitioned real-data retrieval
    # evaluation (group retrieval_eval) in a second run below, only when data.real_data_dir is configured.
    everything, started = args.select == "*", time.time()
    with exclusive(_lock_path(settings), "prag materialize"):
        _recover(settings)
        return _run_materialize(settings, tasks, args.select, everything, args.verbose, started)


def _lock_path(settings: Settings) -> Path:
    """The file lock that makes prag's Dagster commands one writer at a time (prag_assets/cli/doctor.py)."""
    return doctor.lock_path(settings)


def _recover(settings: Settings) -> None:
    """Before a run: release runs whose worker died (prag_assets/cli/doctor.py)."""
    doctor.recover(settings, dagster_env(settings))


def _doctor(args: argparse.Namespace) -> int:
    """`prag doctor`: stale runs, held pool slots, who holds the locks; --fix releases what is safe to release."""
    settings = load_settings()
    return doctor.run_doctor(settings, args.fix, dagster_env(settings))


def _run_materialize(settings: Settings, tasks: list[str], select: str, everything: bool, verbose: bool = False,
                     started: float | None = None) -> int:  # fmt: skip
    """The run(s) of `prag materialize` (prag_assets/cli/run_graph.py in a child process), the readers' snapshot after
    each, then the time per stage, where to look next and the verdict."""
    started = started or time.time()
    settings = sized_settings(settings)
    first = f"not group:{RETRIEVAL_EVAL_GROUP}" if everything else select
    job = "prag_demo" if everything else ""  # the main pipeline's named job (demo_job.py); a selection runs unnamed
    code, summary = _launch(settings, first, f"{tasks[0]}...{tasks[-1]}", tasks, verbose, started, job)
    summaries = [summary]
    _publish(settings, code)
    if everything and not settings.data.real_data_dir:
        run_summary.say("data.real_data_dir is not set: the PersonaBench / LongMemEval retrieval evaluation is "
                        "skipped (e.g. PRAG__DATA__REAL_DATA_DIR=../shared/data)")  # fmt: skip
    elif everything:
        evaluation, summary = _launch(settings, f"group:{RETRIEVAL_EVAL_GROUP}", None, tasks, verbose, started,
                                      "prag_retrieval_eval")  # fmt: skip
        summaries.append(summary)
        _publish(settings, evaluation)
        code = code or evaluation
    run_summary.print_summary(settings, summaries, time.time() - started, code, verdict=everything)
    for line in deferred_note(settings) if everything else []:
        run_summary.say(line)
    return code


def _launch(settings: Settings, select: str, partition_range: str | None, tasks: list[str], verbose: bool,
            started: float, job: str = "", command: str = "prag materialize",
            ) -> tuple[int, run_summary.RunSummary]:  # fmt: skip
    """One run (of the named job, else of the selection) in a child process, tagged with the command, the settings
    hash and the code's commit, its output in a log file under the home (on the terminal too with --verbose), its
    stages printed as they finish (prag_assets/cli/run_progress.py)."""
    from prag_assets.automation.demo_job import launch_tags

    token = uuid.uuid4().hex
    cmd = run_command(select, partition_range, token, job=job, tags=launch_tags(settings, command, PROJECT_ROOT))
    log = settings.home_path / "dagster" / "logs" / f"materialize-{time.strftime('%Y%m%d-%H%M%S')}-{token[:6]}.log"
    scope = f" for {partition_range}" if partition_range else ""
    print(f"[prag] materialize {f'job {job} ({select})' if job else select}{scope} (log: {log})", flush=True)
    env = dagster_env(settings) | child_env(settings)
    return run_summary.watch(settings, cmd, env, log, token, tasks, verbose, started)


def run_command(select: str, partition_range: str | None, token: str, partition: str | None = None, job: str = "",
                tags: dict[str, str] | None = None, run_config: dict | None = None) -> list[str]:  # fmt: skip
    """The child process of one run: prag_assets/cli/run_graph.py (the named job, else the selection, in process with
    the instance)."""
    what = ["--job", job] if job else ["--select", select]
    cmd = [sys.executable, "-m", "prag_assets.cli.run_graph", *what, "--tag", f"prag/launch={token}"]
    cmd += [arg for key, value in (tags or {}).items() for arg in ("--tag", f"{key}={value}")]
    if run_config:
        cmd += ["--run-config", json.dumps(run_config)]
    if partition_range:
        cmd += ["--partition-range", partition_range]
    if partition:
        cmd += ["--partition", partition]
    return cmd


def _publish(settings: Settings, code: int) -> None:
    """After a successful run, publish a consistent read-only snapshot of the DuckDB file for readers."""
    from prag_models.privacy.rules import publish_readers_snapshot
    from prag_models.storage.store import DuckDBBusyError

    if code != 0 or not settings.duckdb_path.exists():
        return
    try:
        print(f"[prag] readers' snapshot: {publish_readers_snapshot(settings.duckdb_path)}", flush=True)
    except DuckDBBusyError as exc:  # another run took the file meanwhile: the previous snapshot stays valid
        print(f"[prag] snapshot not refreshed: {exc}", flush=True)


def _report(args: argparse.Namespace) -> int:
    """Print the evaluation tables (value ± half-width, n), the paired comparisons, the seed claims, the paths."""
    import pandas as pd

    from prag_models.data.set_aside import set_aside_lines
    from prag_models.evaluation import retrieval as rev
    from prag_models.evaluation.claims import claims_from_store, claims_markdown
    from prag_models.evaluation.report import comparisons_markdown, evaluation_markdown
    from prag_models.evaluation.verdict import verdicts_for, verdicts_markdown
    from prag_models.evaluation.verdict_view import deciding_text
    from prag_models.storage.store import DuckDBBusyError, read_connection, table_exists

    settings = load_settings()
    tasks = list(settings.data.tasks)
    try:
        with read_connection(settings.duckdb_path) as (con, source):
            have = {t: table_exists(con, t) for t in
                    ("lamp_evaluation", "lamp_evaluation_comparisons", "lamp_retrieval_evaluation",
                     "lamp_retrieval_comparisons", "retrieval_evaluation")}  # fmt: skip
            set_aside = set_aside_lines(con, tasks)  # malformed records left out (data.malformed), one line a task
            print("\n".join(set_aside) + "\n\n" if set_aside else "", end="")
            if not have["lamp_evaluation"] and not have["lamp_retrieval_evaluation"]:
                print("no evaluation yet: run `prag materialize` first", file=sys.stderr)
                return 1
            read = {t: con.execute(f"SELECT * FROM {t}").df() for t, ok in have.items() if ok}
            read.pop("retrieval_evaluation", None)
            claims = claims_from_store(con, tasks)
            verdicts = verdicts_for(con, settings, tasks)
    except (FileNotFoundError, DuckDBBusyError) as exc:
        print(f"prag report: {exc}", file=sys.stderr)
        return 3
    if source != "live":
        print(f"(a run holds the DuckDB file: reading the last published {source})\n")
    frames = {t: f[f["task"].isin(tasks)] for t, f in read.items()}
    if len(verdicts):
        print("## Verdict: the best personalized method against non-personalized retrieval (dense_global)\n")
        print(deciding_text(verdicts) + "\n\nEvery column (Holm across tasks, held-out values, the own profile, "
              "samples for 80 % power):\n")  # fmt: skip
        print(verdicts_markdown(verdicts) + "\n")
    if "lamp_retrieval_evaluation" in frames:
        print("## Retrieval evaluation, no LLM (every dev sample; 95 % bootstrap intervals)\n")
        empty = pd.DataFrame(columns=rev.COMPARISON_COLUMNS)
        comparisons = frames.get("lamp_retrieval_comparisons", empty)
        print(rev.summary_markdown(frames["lamp_retrieval_evaluation"], comparisons))
    if "lamp_evaluation" in frames:
        print("\n## LLM evaluation (data.llm_eval_samples per task; value ± half-width of the 95 % interval)\n")
        print(evaluation_markdown(frames["lamp_evaluation"]) if len(frames["lamp_evaluation"]) else
              "(none yet: the run's budget deferred the generated outputs to `prag evidence`)")  # fmt: skip
        if "lamp_evaluation_comparisons" in frames and len(frames["lamp_evaluation_comparisons"]):
            print("\nPaired differences of the primary metric (positive = better than the baseline):\n")
            print(comparisons_markdown(frames["lamp_evaluation_comparisons"]))
    if len(claims):
        print("\n## The seeds' claims (benchmarks/seed_orderings.py)\n")
        print(claims_markdown(claims))
    retrieval_md = settings.home_path / "reports" / "retrieval_evaluation.md"
    if have["retrieval_evaluation"] and retrieval_md.exists():
        print("\n## Retrieval evaluation on real data (PBR, docs/methods.md §4.5; table retrieval_evaluation)\n")
        print(retrieval_md.read_text(encoding="utf-8").rstrip())
    print(f"\nDuckDB file : {settings.duckdb_path}")
    print(f"Charts      : {settings.home_path / 'reports' / 'verdict_gain.png'} (the verdict's gain per task) | "
          f"{settings.home_path / 'reports' / 'lamp_evaluation.png'} (LLM evaluation)")
    print("Dagster UI  : scripts/ui.sh  (then open http://127.0.0.1:3000)")
    return 0


def _ingest(args: argparse.Namespace) -> int:
    """Validate new profile documents and append them to profile_history (nothing is written if a file is bad)."""
    import duckdb

    from prag_models.data.history import inbox_dir, ingest_files
    from prag_models.data.sharing import newest_statement
    from prag_models.data.tasks import LampDataError, task_from_name
    from prag_models.privacy.rules import publish_if_consent_changed
    from prag_models.storage.store import DuckDBBusyError, connect

    settings = load_settings()
    path = settings.duckdb_path
    try:
        task = task_from_name(args.task)
        with connect(path) as con:
            before = newest_statement(con)
            result = ingest_files(con, args.files, task, settings.data.undated)
            # a withdrawn consent reaches the readers now, before any run can take the file (docs/privacy.md)
            published = publish_if_consent_changed(con, before)
        if published is not None:
            print(f"consent statements: readers' snapshot republished: {published}")
    except LampDataError as exc:
        print(f"prag ingest: {exc}\nnothing was written", file=sys.stderr)
        return 2
    except (duckdb.IOException, DuckDBBusyError) as exc:
        print(f"prag ingest: the DuckDB file is in use by another process ({exc}); retry later, or copy the files "
              f"into the drop folder {inbox_dir(settings.home_path, args.task)}", file=sys.stderr)  # fmt: skip
        return 3
    for source, batch, rows in result.batches:
        print(f"{source}: batch {batch}: " + (f"{rows} documents appended" if rows else "already ingested, skipped"))
    print(f"{task}: {len(result.users)} users with new documents ({len(result.new_users)} new users)")
    if task not in settings.data.tasks:
        print(f"warning: {task} is not in data.tasks {list(settings.data.tasks)}: it will not be applied")
    if not args.apply:
        print("the sensor profile_history_sensor applies them when `dagster dev` runs; or: prag ingest --apply ...")
        return 0
    with exclusive(_lock_path(settings), "prag ingest --apply"):
        _recover(settings)
        started = time.time()
        token = uuid.uuid4().hex
        log = settings.home_path / "dagster" / "logs" / f"ingest-{time.strftime('%Y%m%d-%H%M%S')}-{token[:6]}.log"
        print(f"[prag] materialize group:history for {task} (log: {log})", flush=True)
        from prag_assets.automation.demo_job import launch_tags

        tags = launch_tags(settings, "prag ingest --apply", PROJECT_ROOT)
        cmd = run_command("group:history", None, token, partition=task, job=INCREMENTAL_JOB, tags=tags)
        code, summary = run_summary.watch(settings, cmd, dagster_env(settings), log, token, [task], False, started)
        run_summary.print_summary(settings, [summary], time.time() - started, code, verdict=False)
        return code


def _promotion(args: argparse.Namespace) -> int:
    """`prag promote` / `prag rollback`: decide, record in MLflow and model_promotions, print; 1 when refused."""
    from functools import partial

    import duckdb

    from prag_models.data.tasks import LampDataError, task_from_name
    from prag_models.mlops.promotion import REFUSED, append_decision, mlflow_target, promote, rollback
    from prag_models.stages.promotion_evidence import read_evidence
    from prag_models.storage.store import DuckDBBusyError, connect

    settings = load_settings()
    actor = os.environ.get("USER") or "unknown"
    try:
        task = task_from_name(args.task)
        with connect(settings.duckdb_path) as con:  # opened first: a busy file stops before any MLflow change
            if args.command == "promote":  # decided on the paired evidence cfrag_model_evaluation recorded
                evidence = partial(read_evidence, con, task)
                decision = promote(mlflow_target(settings), task, actor, args.reason, args.override, evidence)
            else:
                decision = rollback(mlflow_target(settings), task, actor, args.reason, args.override)
            append_decision(con, decision)
    except (LampDataError, LookupError) as exc:
        print(f"prag {args.command}: {exc}", file=sys.stderr)
        return 2
    except (duckdb.IOException, DuckDBBusyError) as exc:
        job = f"{args.command}_cfrag_models"
        print(f"prag {args.command}: the DuckDB file is in use by another process ({exc}); nothing was changed: "
              f"retry later, or launch job {job} from the Dagster UI", file=sys.stderr)  # fmt: skip
        return 3
    print(decision.summary())
    return 1 if decision.action == REFUSED else 0


def _answer(args: argparse.Namespace) -> int:
    """`prag answer`: one personalized answer with the champion models and the current similar users."""
    import duckdb
    from mlflow.exceptions import MlflowException

    from prag_models.data.tasks import LampDataError, task_from_name
    from prag_models.mlops.answer_once import answer_once
    from prag_models.mlops.serving import format_answer
    from prag_models.storage.store import DuckDBBusyError, connect

    settings = load_settings()
    try:
        task = task_from_name(args.task)
        with connect(settings.duckdb_path) as con:  # read-write: the answer goes through generation_cache
            result = answer_once(con, settings, task, args.user, args.method, args.input)
    except (LampDataError, LookupError, ValueError, FileNotFoundError, MlflowException) as exc:
        print(f"prag answer: {exc}", file=sys.stderr)
        return 2
    except (duckdb.IOException, DuckDBBusyError) as exc:
        print(f"prag answer: the DuckDB file is in use by another process ({exc}); retry when the run ends",
              file=sys.stderr)  # fmt: skip
        return 3
    print(format_answer(result))
    return 0


def dagster_env(settings: Settings, warn: bool = True) -> dict[str, str]:
    """The environment of a dagster subprocess: the project's dagster.yaml, run storage under the prag home.

    prag's instance always wins: an inherited ``DAGSTER_HOME`` (or ``PRAG_DAGSTER_STORAGE`` / ``PRAG_DAGSTER_LOGS``)
    that points elsewhere is reported on stderr, naming both, and replaced, so that the runs, the pool slots that
    ``prag doctor`` releases and the home's lock all belong to the same home.
    """
    storage = settings.home_path / "dagster"
    (storage / "logs").mkdir(parents=True, exist_ok=True)
    ours = {
        "DAGSTER_HOME": str(PROJECT_ROOT),
        "PRAG_DAGSTER_STORAGE": str(storage),
        "PRAG_DAGSTER_LOGS": str(storage / "logs"),
    }
    for name, value in ours.items():
        inherited = os.environ.get(name)
        if warn and inherited and Path(inherited).expanduser().resolve() != Path(value).resolve():
            print(f"[prag] warning: ignoring the inherited {name}={inherited}: prag's Dagster instance for home "
                  f"{settings.home_path} uses {name}={value}", file=sys.stderr, flush=True)  # fmt: skip
    return {**os.environ, **ours}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the prag command."""
    parser = argparse.ArgumentParser(prog="prag", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("materialize", help="materialize the asset graph for the configured tasks")
    m.add_argument("--select", default="*", help="Dagster asset selection (default: everything)")
    m.add_argument("--verbose", action="store_true", help="also print the Dagster event log (DEBUG events)")
    m.set_defaults(func=_materialize)
    d = sub.add_parser("doctor", help="show stale runs, held pool slots and lock holders; --fix releases them")
    d.add_argument("--fix", action="store_true", help="mark runs whose process is gone failed and free their slots")
    d.set_defaults(func=_doctor)
    i = sub.add_parser("ingest", help="append new profile documents (JSON list, see prag_models/data/history.py)")
    i.add_argument("files", nargs="+", help="JSON files: [{user_id, id, date?, <task fields>}, ...]")
    i.add_argument("--task", required=True, help="LaMP task of the documents, e.g. LaMP-2")
    i.add_argument("--apply", action="store_true", help="run the incremental update for the task right away")
    i.set_defaults(func=_ingest)
    r = sub.add_parser("report", help="print the LaMP evaluation table")
    r.set_defaults(func=_report)
    p = sub.add_parser("promote", help="make a task's CFRAG challenger models champion if their metric is better")
    p.add_argument("--task", required=True, help="LaMP task, e.g. LaMP-2")
    p.add_argument("--reason", required=True, help="why (recorded on the model versions and in model_promotions)")
    p.add_argument("--override", action="store_true", help="promote even if the challenger is not better")
    p.set_defaults(func=_promotion)
    b = sub.add_parser("rollback", help="give alias champion back to the versions before the last promotion")
    b.add_argument("--task", required=True, help="LaMP task, e.g. LaMP-2")
    b.add_argument("--reason", required=True, help="why (recorded on the model versions and in model_promotions)")
    b.add_argument("--override", action="store_true",
                   help="restore even versions the gate refuses (flagged after an erasure, or not learned)")
    b.set_defaults(func=_promotion)
    a = sub.add_parser("answer", help="answer one input for a user with the champion models")
    a.add_argument("--task", required=True, help="LaMP task, e.g. LaMP-2")
    a.add_argument("--user", required=True, help="user id (unknown users get the cold-start rule)")
    a.add_argument("--input", required=True, help="the LaMP input text (the query is extracted from it)")
    a.add_argument("--method", default="cfrag",
                   choices=["cfrag", "clusterrag_collaborative", "clusterrag_hybrid", "item_cf"])  # fmt: skip
    a.set_defaults(func=_answer)
    add_sql_command(sub)
    add_forget_command(sub)
    add_relocate_command(sub)
    add_lifecycle_command(sub, LifecycleHelpers(run_command, dagster_env, _lock_path, _recover, _publish,
                                                sized_settings, child_env, deferred_note))  # fmt: skip
    add_evidence_command(sub, EvidenceHelpers(_launch, _lock_path, _recover, _publish))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
