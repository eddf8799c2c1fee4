"""`prag forget --user U [--task T]`: erase a user's data from the DuckDB file and Dagster's records and flag the
models trained on it (prag_models.privacy.forget, prag_assets/cli/forget_records.py; docs/privacy.md)."""

from __future__ import annotations

import argparse
import sys


def run_forget(user: str, task: str | None = None) -> int:
    """Forget one user (of one task, or everywhere) and print what went; 0 on success, 1 on an unknown user."""
    import sqlite3

    from prag_assets.cli.doctor import exclusive, lock_path
    from prag_assets.cli.forget_records import erase_dagster_records, source_ids
    from prag_models.config.settings import load_settings
    from prag_models.mlops.promotion import mlflow_target
    from prag_models.mlops.registry import make_client
    from prag_models.privacy.forget import compact_file, forget
    from prag_models.privacy.rules import publish_readers_snapshot
    from prag_models.storage.store import connect, snapshot_path

    settings = load_settings()
    path = settings.duckdb_path
    if not path.exists():
        print(f"prag forget: {path} does not exist: there is no data to erase", file=sys.stderr)
        return 1
    client = make_client(mlflow_target(settings))
    published = None
    # Dagster's runs and logs that name the user's ids: DuckDB's, and the source's (a run that stopped on the user's
    # malformed record loaded none of them)
    named = source_ids(settings, user, task)

    def erase_records(ids: set[str]) -> dict[str, int]:
        return erase_dagster_records(settings, ids | named)
    try:
        # the home's lock: no `prag materialize` or `prag ingest --apply` writes Dagster's records meanwhile
        with exclusive(lock_path(settings), "prag forget"), connect(path) as con:
            erasure = forget(con, user, task, client, erase_records)
            if erasure.already_erased:  # again: finish an erasure a crash interrupted (the other ids are gone)
                erasure.records = erase_records({user})
            if not erasure.already_erased and snapshot_path(path).exists():
                # the readers' copy must not keep the user either: republished before any run can take the file
                published = publish_readers_snapshot(path, con)
            # the deleted rows' bytes stay in the file's freed blocks until it is rewritten; again for a user erased
            # before, so that running forget again finishes an erasure a crash interrupted
            compact_file(con, path)
    except LookupError as exc:
        print(f"prag forget: {exc}", file=sys.stderr)
        return 1
    except sqlite3.OperationalError as exc:  # a Dagster process holds the instance's files: the rows are not deleted
        print(f"prag forget: Dagster's records are in use ({exc}); stop `dagster dev` and run it again",
              file=sys.stderr)  # fmt: skip
        return 1
    scope = f" ({task})" if task else ""
    going = erasure.records.get("dagster_runs_going", 0)
    if going:
        print(f"warning: {going} Dagster run(s) still going name the user: run prag forget again when they end",
              file=sys.stderr)  # fmt: skip
    if erasure.already_erased:
        print(f"user {user}{scope} was erased before: nothing left to delete in DuckDB; Dagster: {erasure.records}")
        return 0
    print(f"erased user {user}{scope}: {erasure.rows_deleted} rows (erasure {erasure.erasure_id})")
    for table, n in sorted(erasure.deleted.items()):
        print(f"  {table}: {n}")
    print(f"models flagged for retraining: {', '.join(erasure.models_flagged) or 'none'}")
    if erasure.records:
        runs, logs = erasure.records.get("dagster_runs", 0), erasure.records.get("dagster_log_files", 0)
        print(f"Dagster: {runs} runs and {logs} log files that named the user deleted, its files vacuumed")
    if published is not None:
        print(f"readers' snapshot republished: {published}")
    return 0


def add_forget_command(sub: argparse._SubParsersAction) -> None:
    """Register `prag forget --user U [--task T]` on the CLI's subcommands."""
    f = sub.add_parser("forget", help="erase a user's data (all tables, one transaction) and flag affected models")
    f.add_argument("--user", required=True, help="the user id to erase")
    f.add_argument("--task", default=None, help="only this LaMP task (default: every task)")
    f.set_defaults(func=lambda args: run_forget(args.user, args.task))
