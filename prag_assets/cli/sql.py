"""`prag sql "<query>"`: one read-only SQL query on the prag home's DuckDB file, printed as a table.

The `duckdb` CLI on PyPI cannot open a file written by DuckDB 2.0, so prag ships its own reader: it opens the file
read-only through ``storage.store.read_connection`` (the last published snapshot while a run holds the file), so
a query can never change a table, and turns DuckDB's external access off on that connection (the configuration then
locked), so a query can neither write a file (``COPY ... TO``), read one (``read_csv('/etc/passwd')``), attach
another database nor install an extension. DuckDB still lets a query read the open database's own file that way
(``read_blob('.prag/prag.duckdb')``: the whole file, freed blocks and the rows they held included), so a query
that calls any table function but DuckDB's catalog views and generators, or names a file as a table, is refused
before it runs: it reads the prag tables and nothing else.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

FORMATS = ("table", "csv", "json")
#: Run on the connection before the query: no file system or network access, and no way to turn it back on.
LOCKDOWN = ("SET enable_external_access = false", "SET lock_configuration = true")
#: The table functions a query may call (besides duckdb_* and pragma_*): none reads a file. Every other one is
#: refused: read_blob, read_text, read_csv, read_parquet, read_json, glob, parquet_*, sniff_csv, query, query_table, …
SAFE_TABLE_FUNCTIONS = ("range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree",
                        "test_all_types", "pg_timezone_names", "icu_calendar_names")  # fmt: skip
SAFE_PREFIXES = ("duckdb_", "pragma_")
_STRING = re.compile(r"'(?:[^']|'')*'")
_CALL = re.compile(r'"?([A-Za-z_][A-Za-z0-9_]*)"?\s*\(')


def _safe(function: str) -> bool:
    """Whether a table function reads no file."""
    return function.lower() in SAFE_TABLE_FUNCTIONS or function.lower().startswith(SAFE_PREFIXES)


def _sources(node: Any, out: list[str]) -> list[str]:
    """The table functions and file-like table names of a serialized query tree (json_serialize_sql), refused ones."""
    if isinstance(node, dict):
        if node.get("type") == "TABLE_FUNCTION" and not _safe(node["function"]["function_name"]):
            out.append(node["function"]["function_name"] + "()")
        if node.get("type") == "BASE_TABLE" and re.search(r"[./\\]", node.get("table_name", "")):
            out.append(repr(node["table_name"]))  # a replacement scan: FROM 'file.csv'
        node = list(node.values())
    if isinstance(node, list):
        for child in node:
            _sources(child, out)
    return out


def file_readers(con: Any, query: str) -> list[str]:
    """What in the query would read a file: table functions outside SAFE_TABLE_FUNCTIONS and tables named by a path
    (from DuckDB's own parse of SELECT statements; in other statements, every call of such a function)."""
    tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [query]).fetchone()[0])
    if not tree.get("error"):
        return _sources(tree, [])
    tables = {n for (n,) in con.execute("SELECT function_name FROM duckdb_functions() WHERE function_type = 'table'")
              .fetchall()}  # fmt: skip
    return [f"{f}()" for f in _CALL.findall(_STRING.sub("''", query)) if f.lower() in tables and not _safe(f)]


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
            refused = file_readers(con, query)
            if refused:
                print(f"prag sql: refused: {', '.join(dict.fromkeys(refused))} would read a file; prag sql reads the "
                      "prag tables only, never a file (not even its own database file)", file=sys.stderr)  # fmt: skip
                return 1
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
