"""The `prag` command (commands.py: its argument parsing): the materialize runner (run_graph.py in a child process,
run_progress.py while it goes, run_summary.py at the end), doctor, sql, forget, relocate, lifecycle, ingest, answer,
report."""

from prag_assets.cli.commands import main

__all__ = ["main"]
