"""`python -m prag_assets.cli.ui_port dagster|mlflow`: the port of the configured UI address (run.dagster_ui_url,
mlflow.ui_url), so that scripts/ui.sh and scripts/mlflow_ui.sh start each UI where the links prag writes into runs and
metadata point (issue 50.5)."""

from __future__ import annotations

import sys
from urllib.parse import urlparse

DEFAULTS = {"dagster": 3000, "mlflow": 5000}


def configured_port(which: str) -> int:
    """The port of the configured address of the Dagster or MLflow UI (its default when the URL names none)."""
    from prag_models.config.settings import load_settings

    settings = load_settings()
    url = settings.run.dagster_ui_url if which == "dagster" else settings.mlflow_ui_url
    return urlparse(url).port or DEFAULTS[which]


def main(argv: list[str]) -> int:
    """Print the port; 2 for a wrong argument."""
    if len(argv) != 1 or argv[0] not in DEFAULTS:
        print("usage: python -m prag_assets.cli.ui_port dagster|mlflow", file=sys.stderr)
        return 2
    print(configured_port(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
