"""The `prag` command: materialize the graph, print the evaluation table."""

import argparse
import os
import subprocess
import sys

from prag_models.config import ALL_TASKS, load_settings


def _materialize(args: argparse.Namespace) -> int:
    """Run `dagster asset materialize` for the configured tasks in one run (models load once)."""
    settings = load_settings()
    tasks = [t for t in ALL_TASKS if t in settings.data.tasks]
    if not tasks:
        print("no tasks configured (data.tasks)", file=sys.stderr)
        return 2
    cmd = [
        sys.executable,
        "-m",
        "dagster",
        "asset",
        "materialize",
        "-m",
        "prag_assets.definitions",
        "--select",
        args.select,
        "--partition-range",
        f"{tasks[0]}...{tasks[-1]}",
    ]
    print("[prag] " + " ".join(cmd[2:]), flush=True)
    return subprocess.call(cmd, env=os.environ.copy())


def _report(args: argparse.Namespace) -> int:
    """Print the evaluation table and where the outputs are."""
    from prag_models.report import evaluation_markdown
    from prag_models.store import connect, table_exists

    settings = load_settings()
    with connect(settings.duckdb_path, read_only=True) as con:
        if not table_exists(con, "lamp_evaluation"):
            print("no evaluation yet: run `prag materialize` first", file=sys.stderr)
            return 1
        table = con.execute("SELECT * FROM lamp_evaluation ORDER BY task, method, metric").df()
    table = table[table["task"].isin(settings.data.tasks)]
    print(evaluation_markdown(table))
    print(f"\nDuckDB file : {settings.duckdb_path}")
    print(f"Chart       : {settings.home_path / 'reports' / 'lamp_evaluation.png'}")
    print("Dagster UI  : scripts/ui.sh  (then open http://127.0.0.1:3000)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the prag command."""
    parser = argparse.ArgumentParser(prog="prag", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("materialize", help="materialize the asset graph for the configured tasks")
    m.add_argument("--select", default="*", help="Dagster asset selection (default: everything)")
    m.set_defaults(func=_materialize)
    r = sub.add_parser("report", help="print the LaMP evaluation table")
    r.set_defaults(func=_report)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
