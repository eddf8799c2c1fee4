"""The `prag` command: materialize the graph, print the evaluation table."""

import argparse
import os
import subprocess
import sys

from prag_models.config import ALL_TASKS, PROJECT_ROOT, load_settings

#: Asset group of the real-data retrieval evaluation (prag_assets/assets/pbr_eval.py), run in its own run.
RETRIEVAL_EVAL_GROUP = "retrieval_eval"


def _materialize(args: argparse.Namespace) -> int:
    """Run `dagster asset materialize` for the configured tasks in one run (models load once)."""
    settings = load_settings()
    tasks = [t for t in ALL_TASKS if t in settings.data.tasks]
    if not tasks:
        print("no tasks configured (data.tasks)", file=sys.stderr)
        return 2
    # The default selection runs the task-partitioned LaMP graph here and the unpartitioned real-data retrieval
    # evaluation (group retrieval_eval) in a second run below, only when data.real_data_dir is configured.
    everything = args.select == "*"
    cmd = [
        sys.executable,
        "-m",
        "dagster",
        "asset",
        "materialize",
        "-m",
        "prag_assets.definitions",
        "--select",
        f"not group:{RETRIEVAL_EVAL_GROUP}" if everything else args.select,
        "--partition-range",
        f"{tasks[0]}...{tasks[-1]}",
    ]
    print("[prag] " + " ".join(cmd[2:]), flush=True)
    code = subprocess.call(cmd, env=os.environ.copy())
    if not everything:
        return code
    if not settings.data.real_data_dir:
        print("[prag] data.real_data_dir is not set: the PersonaBench / LongMemEval retrieval evaluation is skipped "
              "(e.g. PRAG__DATA__REAL_DATA_DIR=../shared/data)", flush=True)
        return code
    cmd = [*cmd[:8], f"group:{RETRIEVAL_EVAL_GROUP}"]
    print("[prag] " + " ".join(cmd[2:]), flush=True)
    evaluation = subprocess.call(cmd, env=os.environ.copy())
    return code or evaluation


def _report(args: argparse.Namespace) -> int:
    """Print the evaluation table and where the outputs are."""
    from prag_models.report import evaluation_markdown
    from prag_models.store import connect, table_exists

    settings = load_settings()
    with connect(settings.duckdb_path, read_only=True) as con:
        retrieval_eval = table_exists(con, "retrieval_evaluation")
        if not table_exists(con, "lamp_evaluation"):
            print("no evaluation yet: run `prag materialize` first", file=sys.stderr)
            return 1
        table = con.execute("SELECT * FROM lamp_evaluation ORDER BY task, method, metric").df()
    table = table[table["task"].isin(settings.data.tasks)]
    print(evaluation_markdown(table))
    retrieval_md = settings.home_path / "reports" / "retrieval_evaluation.md"
    if retrieval_eval and retrieval_md.exists():
        print("\n## Retrieval evaluation on real data (PBR, METHODS §4.5; table retrieval_evaluation)\n")
        print(retrieval_md.read_text(encoding="utf-8").rstrip())
    print(f"\nDuckDB file : {settings.duckdb_path}")
    print(f"Chart       : {settings.home_path / 'reports' / 'lamp_evaluation.png'}")
    print("Dagster UI  : scripts/ui.sh  (then open http://127.0.0.1:3000)")
    return 0


def _ingest(args: argparse.Namespace) -> int:
    """Validate new profile documents and append them to profile_history (nothing is written if a file is bad)."""
    import duckdb

    from prag_models.data.history import inbox_dir, ingest_files
    from prag_models.data.tasks import LampDataError, task_from_name
    from prag_models.store import connect

    settings = load_settings()
    try:
        task = task_from_name(args.task)
        with connect(settings.duckdb_path) as con:
            result = ingest_files(con, args.files, task)
    except LampDataError as exc:
        print(f"prag ingest: {exc}\nnothing was written", file=sys.stderr)
        return 2
    except duckdb.IOException as exc:
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
    cmd = [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "prag_assets.definitions",
           "--select", "group:history", "--partition", task]  # fmt: skip
    print("[prag] " + " ".join(cmd[2:]), flush=True)
    storage = settings.home_path / "dagster"
    (storage / "logs").mkdir(parents=True, exist_ok=True)
    env = {"DAGSTER_HOME": str(PROJECT_ROOT), "PRAG_DAGSTER_STORAGE": str(storage),
           "PRAG_DAGSTER_LOGS": str(storage / "logs"), **os.environ}  # as scripts/env.sh sets them  # fmt: skip
    return subprocess.call(cmd, env=env)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the prag command."""
    parser = argparse.ArgumentParser(prog="prag", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("materialize", help="materialize the asset graph for the configured tasks")
    m.add_argument("--select", default="*", help="Dagster asset selection (default: everything)")
    m.set_defaults(func=_materialize)
    i = sub.add_parser("ingest", help="append new profile documents (JSON list, see prag_models/data/history.py)")
    i.add_argument("files", nargs="+", help="JSON files: [{user_id, id, date?, <task fields>}, ...]")
    i.add_argument("--task", required=True, help="LaMP task of the documents, e.g. LaMP-2")
    i.add_argument("--apply", action="store_true", help="run the incremental update for the task right away")
    i.set_defaults(func=_ingest)
    r = sub.add_parser("report", help="print the LaMP evaluation table")
    r.set_defaults(func=_report)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
