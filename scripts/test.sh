#!/usr/bin/env bash
# Command 2: set up (idempotent) and run the tests (pass pytest arguments through, e.g. -m "not slow").
#   --fast  the fast tier: no test that loads a real model (marked `models` in tests/conftest.py MODEL_MODULES; in
#           this tier an unmarked test that loads one fails), no slow test; about 2 minutes on 2 cores.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
fast=()
if [[ "${1:-}" == "--fast" ]]; then
  shift
  export PRAG_FAST_TESTS=1
  fast=(-m "not models and not slow")
fi
bash scripts/setup.sh
export PRAG_REAL_DATA="${PRAG_REAL_DATA:-$PRAG_ROOT/../shared/data}"
"$PRAG_VENV/bin/ruff" check prag_models prag_assets tests benchmarks
"$PRAG_VENV/bin/lint-imports"  # layer contracts in pyproject.toml [tool.importlinter]
# The docs site (mkdocs.yml): a broken link, anchor or nav entry fails here, in seconds, before the tests.
NO_MKDOCS_2_WARNING=1 "$PRAG_VENV/bin/mkdocs" build --strict
# Two workers (one per core; a test module stays on one worker, so its module fixtures are built once, the files
# that share a session fixture share one worker: tests/conftest.py TOGETHER, and the longest files are handed out
# first: FILE_SECONDS); the slowest tests are listed so that a slow one is seen. PRAG_TEST_WORKERS=0 runs in one
# process.
"$PRAG_VENV/bin/python" -m pytest -q -p no:cacheprovider -n "${PRAG_TEST_WORKERS:-2}" --dist loadfile --durations=25 \
  "${fast[@]}" "$@"
