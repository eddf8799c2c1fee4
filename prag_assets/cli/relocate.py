"""`prag relocate`: after a home was moved or copied, point its MLflow store at the home's own artifact folder
(prag_models/mlops/relocation.py; every prag command that opens the store does the same on its own)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def run_relocate() -> int:
    """Rewrite the home's MLflow artifact locations to this home and say what moved; 0, or 2 on a config naming
    another home than PRAG_HOME."""
    from prag_models.config.settings import load_settings
    from prag_models.mlops.relocation import home_note, relocate

    settings = load_settings()
    named = os.environ.get("PRAG_HOME", "")
    if named and not os.environ.get("PRAG_CONFIG") and Path(named).expanduser().resolve() != settings.home_path:
        print(f"prag relocate: {Path(named) / 'prag.toml'} names home = {str(settings.home_path)!r}, not PRAG_HOME "
              f"{named}: remove its `home` line (or set it to the new folder) first", file=sys.stderr)  # fmt: skip
        return 2
    if settings.mlflow.tracking_uri:
        print(f"mlflow.tracking_uri is {settings.mlflow.tracking_uri}: that store keeps its own artifact locations")
        return 0
    artifacts = settings.mlflow_artifacts_path
    print(home_note(relocate(settings.home_path / "mlflow.db", artifacts), artifacts))
    return 0


def add_relocate_command(sub: argparse._SubParsersAction) -> None:
    """Register `prag relocate` on the CLI's subcommands."""
    r = sub.add_parser("relocate", help="after moving or copying the home: its MLflow store reads the home's own "
                       "artifacts (any prag command that opens the store does it too)")  # fmt: skip
    r.set_defaults(func=lambda _args: run_relocate())
