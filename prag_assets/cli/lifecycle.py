"""`prag lifecycle`: one round of the models' life after the demo (docs/how-to/promotion.md).

1. A second week of histories for every configured task, written by the demo's generator
   (``prag_models/data/demo_week.py``: more documents for existing users, users whose taste moves, new users), is
   dropped into the inbox folders ``<home>/inbox/<task>/`` — the path users' files take.
2. Job ``incremental_update_job`` (what the history sensor launches) ingests them and updates the changed users:
   documents, embeddings, incremental re-clustering, similar users.
3. Job ``prag_retrain`` retrains the user encoder and CFRAG's retriever and rerankers on the grown histories; each
   new version is registered as its model's challenger, and ``cfrag_model_evaluation`` records the paired evidence
   of challenger against champion over the same dev samples.
4. Job ``promote_cfrag_models`` runs the gate for each task: promote when the paired 95 % interval lies on the better
   side of 0, keep the champion otherwise; the reason (figures, interval, n) goes to the MLflow versions (description
   and tags), the run's Dagster metadata and table ``model_promotions``. A kept champion fails its promotion run (the
   gate's refusal, as for ``prag promote``); the round goes on.

5. The verdict as `prag materialize` ends with it; the retraining's LLM evidence is sized by the run's budget as the
   main job's is, and what it deferred is said (`prag evidence` continues it).

The round is demo-only (it writes the demo world's second week) and needs a materialized home (``prag materialize``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prag_models.config.settings import ALL_TASKS, PROJECT_ROOT, Settings, load_settings

#: (job, partition range or None, partition or None, run config or None) -> exit code of that run.
Launch = Callable[[str, "str | None", "str | None", "dict | None"], int]


@dataclass(frozen=True)
class LifecycleHelpers:
    """The CLI's own run machinery (prag_assets/cli/commands.py), handed over so this module does not import the CLI."""

    run_command: Callable[..., list[str]]
    dagster_env: Callable[[Settings], dict[str, str]]
    lock_path: Callable[[Settings], Path]
    recover: Callable[[Settings], None]
    publish: Callable[[Settings, int], None]
    sized: Callable[[Settings], Settings]  # the run's budget on this machine (budget.sized_settings)
    child_env: Callable[[Settings], dict[str, str]]  # the sized settings a run's child gets (budget.child_env)
    closing: Callable[[Settings], list[str]]  # what the budget did not pay (budget.deferred_note)


def add_lifecycle_command(sub: argparse._SubParsersAction, helpers: LifecycleHelpers) -> None:
    """Register `prag lifecycle` on the CLI's subcommands."""
    p = sub.add_parser("lifecycle", help="after the demo: a second week of histories, incremental update, "
                       "retraining, and the promotion gate for every task")  # fmt: skip
    p.add_argument("--reason", default="lifecycle round: second week of histories",
                   help="recorded with every promotion decision")  # fmt: skip
    p.set_defaults(func=lambda args: lifecycle(args.reason, helpers))


def lifecycle(reason: str, helpers: LifecycleHelpers) -> int:
    """`prag lifecycle`: the round under the home's lock, each run launched as `prag materialize` launches its own
    (a child process, its stages printed, tagged with the command, the settings hash and the code's commit)."""
    from prag_assets.automation.demo_job import launch_tags
    from prag_assets.cli import run_summary
    from prag_assets.cli.doctor import exclusive

    settings, started = load_settings(), time.time()
    tasks = [t for t in ALL_TASKS if t in settings.data.tasks]
    tags = launch_tags(settings, "prag lifecycle", PROJECT_ROOT)
    sized: list[Settings] = []  # sized on the first launch (after run_round's checks), as `prag materialize` sizes

    def launch(job: str, span: str | None, partition: str | None, config: dict[str, Any] | None) -> int:
        if not sized:
            sized.append(helpers.sized(settings))
        token = uuid.uuid4().hex
        cmd = helpers.run_command("", span, token, partition, job, tags, config)
        log = settings.home_path / "dagster" / "logs" / f"lifecycle-{job}-{token[:6]}.log"
        print(f"[prag] job {job} (log: {log})", flush=True)
        env = helpers.dagster_env(settings) | helpers.child_env(sized[0])
        code, _ = run_summary.watch(settings, cmd, env, log, token, tasks, False, started)
        return code

    with exclusive(helpers.lock_path(settings), "prag lifecycle"):
        helpers.recover(settings)
        code = run_round(settings, reason, launch)
        helpers.publish(settings, code)
    if not code:  # the verdict after the retraining, and what the budget left to `prag evidence`
        print("\n" + run_summary.verdict_text(settings), flush=True)
        for line in helpers.closing(sized[0] if sized else settings):
            run_summary.say(line)
    return code


def drop_second_week(settings: Settings, tasks: list[str]) -> dict[str, dict]:
    """Write each task's second week beside the home, then move it into the task's inbox folder (as a user does);
    returns what changed per task."""
    from prag_models.data.demo_week import write_second_week
    from prag_models.data.history import inbox_dir

    staging, changed = settings.home_path / "lifecycle", {}
    for task in tasks:
        path, changed[task] = write_second_week(staging, task, settings)
        inbox = inbox_dir(settings.home_path, task)
        inbox.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(Path(inbox) / path.name))
    return changed


def decisions_table(settings: Settings, tasks: list[str]) -> list[str]:
    """One line per task: the last gate decision of the round (model_promotions), with its interval and n."""
    from prag_models.storage.store import read_connection

    with read_connection(settings.duckdb_path) as (con, _):
        rows = con.execute(
            "SELECT task, action, metric, difference, ci_low, ci_high, n_samples, from_version, to_version, "
            "registered_name FROM model_promotions WHERE registered_name LIKE 'prag-reranker-LaMP-%' "
            "AND registered_name NOT LIKE '%no-eu%' QUALIFY row_number() OVER (PARTITION BY task ORDER BY decided_at "
            "DESC) = 1 ORDER BY task"
        ).fetchall()
    lines = []
    for task, action, metric, diff, low, high, n, old, new, _ in rows:
        if task not in tasks:
            continue
        figures = f"{metric} {diff:+.4f}, 95 % CI [{low:+.4f}, {high:+.4f}], n={n}" if n else metric
        verdict = f"promoted v{new} over v{old}" if action == "promoted" else f"kept champion v{old} over v{new}"
        lines.append(f"  {task}: {verdict} ({figures})")
    return lines


def has_champion_bundle(con) -> bool:  # noqa: ANN001 - a DuckDB connection
    """Whether the main job registered CFRAG's models and retrieved with their bundle: all the round needs (the
    bundle's generated-output figures may be deferred by the budget, `prag evidence`; the gate pairs utilities)."""
    from prag_models.stages.cfrag_evaluation import BUNDLE_TABLE
    from prag_models.storage.store import table_exists

    return table_exists(con, "cfrag_models") and table_exists(con, BUNDLE_TABLE)


def run_round(settings: Settings, reason: str, launch: Launch) -> int:
    """The round (module docstring); 0 when every step ran (a kept champion is a decision, not a failure)."""
    from prag_models.storage.store import read_connection

    if settings.data.source != "demo":
        print("prag lifecycle: the round writes the demo world's second week; data.source is "
              f"{settings.data.source!r}: ingest your own files (prag ingest), then retrain", file=sys.stderr)
        return 2
    tasks = [t for t in ALL_TASKS if t in settings.data.tasks]
    try:
        with read_connection(settings.duckdb_path) as (con, _):
            ready = has_champion_bundle(con)
    except FileNotFoundError:
        ready = False
    if not ready:
        print("prag lifecycle: run `prag materialize` first (no registered CFRAG bundle has retrieved yet)",
              file=sys.stderr)  # fmt: skip
        return 2
    span = f"{tasks[0]}...{tasks[-1]}"
    from prag_models.data.demo_week import add_relevance
    from prag_models.storage.store import connect

    changed = drop_second_week(settings, tasks)
    with connect(settings.duckdb_path) as con:  # the demo's planted truth of the new documents (demo_week.py)
        relevant = {task: add_relevance(con, task, what["relevance"]) for task, what in changed.items()}
    for task, what in changed.items():
        print(f"[lifecycle] {task}: week 2 in the inbox: {what['documents']} documents ({relevant[task]} relevant "
              f"pairs planted); {len(what['grown'])} users write more, {len(what['moved'])} change taste, "
              f"{len(what['new'])} are new", flush=True)  # fmt: skip
    for job in ("incremental_update_job", "prag_retrain"):
        code = launch(job, span, None, None)
        if code:
            print(f"[lifecycle] job {job} failed (exit {code}): the round stops here", file=sys.stderr)
            return code
    for task in tasks:
        actor = os.environ.get("USER") or "prag lifecycle"
        config = {"ops": {"promote_cfrag_bundle": {"config": {"task": task, "reason": reason, "actor": actor}}}}
        launch("promote_cfrag_models", None, None, config)  # exit 1 = the gate kept the champion: recorded
    print("[lifecycle] the gate's decisions (full CFRAG reranker; every model of a bundle moves together):")
    print("\n".join(decisions_table(settings, tasks)))
    print("[lifecycle] undo a promotion: prag rollback --task <task> --reason '...'; the reasons are on the MLflow "
          "versions (description, promotion.* tags) and in the promotion runs' metadata (Dagster)", flush=True)
    return 0
