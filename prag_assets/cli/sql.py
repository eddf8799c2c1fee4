"""`prag sql "<query>"`: one read-only SQL query on the prag home's DuckDB file, printed as a table.

The `duckdb` CLI on PyPI cannot open a file written by DuckDB 2.0, so prag ships its own reader: it opens the file
read-only through ``storage.store.read_connection`` (the last published snapshot while a run holds the file), so
a query can never change a table, and turns DuckDB's external access off on that connection (the configuration then
locked), so a query can neither write a file (``COPY ... TO``), read one (``read_csv('/etc/passwd')``), attach
another database nor install an extension: it reads the prag tables and nothing else.
"""

from __future__ import annotations

import argparse
import sys

FORMATS = ("table", "csv", "json")
#: Run on the connection before the query: no file system or network access, and no way to turn it back on.
LOCKDOWN = ("SET enable_external_access = false", "SET lock_configuration = true")


def run_sql(query: str, fmt: str = "table", max_rows: int = 200) -> int:
    """Run one query read-only on the configured DuckDB file and print its result; 0 on success, 1 on error."""
    import duckdb

    from prag_models.config.settings import load_settings
    from prag_models.storage.store import read_connection

    path = load_settings().duckdb_path
    if not path.exists():
        print(f"prag sql: {path} does not exist yet: run `prag materialize` first", file=sys.stderr)
        return 1
    try:
        with read_connection(path) as (con, source):
            for statement in LOCKDOWN:
                con.execute(statement)
            frame = con.execute(query).df()
    except duckdb.Error as exc:
        print(f"prag sql: {exc}", file=sys.stderr)
        return 1
    if source != "live":
        print(f"(a run holds the DuckDB file: reading the last published {source})", file=sys.stderr)
    if fmt == "csv":
        print(frame.to_csv(index=False), end="")
    elif fmt == "json":
        print(frame.to_json(orient="records", date_format="iso"))
    else:
        shown = frame.head(max_rows)
        print(shown.to_markdown(index=False) if len(shown.columns) else "(no columns)")
        if len(frame) > max_rows:
            print(f"... {len(frame) - max_rows} more rows (--max-rows, or --format csv for all)")
    return 0


def add_sql_command(sub: argparse._SubParsersAction) -> None:
    """Register `prag sql "<query>" [--format] [--max-rows]` on the CLI's subcommands."""
    s = sub.add_parser("sql", help="one read-only SQL query on the DuckDB file (table, csv or json)")
    s.add_argument("query", help='SQL, e.g. "select * from lamp_evaluation limit 5"')
    s.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    s.add_argument("--max-rows", type=int, default=200, help="rows printed in table format (default: 200)")
    s.set_defaults(func=lambda args: run_sql(args.query, args.format, args.max_rows))
