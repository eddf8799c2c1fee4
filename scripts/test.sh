#!/usr/bin/env bash
# Command 2: set up (idempotent) and run the tests (pass pytest arguments through, e.g. -m "not slow").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
bash scripts/setup.sh
export PRAG_REAL_DATA="${PRAG_REAL_DATA:-$PRAG_ROOT/../shared/data}"
"$PRAG_VENV/bin/ruff" check prag_models prag_assets tests benchmarks
"$PRAG_VENV/bin/lint-imports"  # layer contracts in pyproject.toml [tool.importlinter]
# The docs site (mkdocs.yml): a broken link, anchor or nav entry fails here, in seconds, before the tests.
NO_MKDOCS_2_WARNING=1 "$PRAG_VENV/bin/mkdocs" build --strict
# Two workers (one per core; a test module stays on one worker, so its module fixtures are built once); the slowest
# tests are listed so that a slow one is seen. PRAG_TEST_WORKERS=0 runs in one process.
"$PRAG_VENV/bin/python" -m pytest -q -p no:cacheprovider -n "${PRAG_TEST_WORKERS:-2}" --dist loadfile --durations=15 "$@"
