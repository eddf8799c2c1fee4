#!/usr/bin/env bash
# Command 2: set up (idempotent) and run the tests (pass pytest arguments through, e.g. -m "not slow").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
bash scripts/setup.sh
export PRAG_REAL_DATA="${PRAG_REAL_DATA:-$PRAG_ROOT/../shared/data}"
"$PRAG_VENV/bin/ruff" check prag_models prag_assets tests benchmarks
"$PRAG_VENV/bin/lint-imports"  # layer contracts in pyproject.toml [tool.importlinter]
"$PRAG_VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
