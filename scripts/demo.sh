#!/usr/bin/env bash
# Command 1: set up (idempotent) and materialize the whole asset graph on the embedded demo with the packaged
# models, printing each stage as it finishes, then the time per stage, where to look next and the verdict.
set -euo pipefail
demo_start=$(date +%s)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
bash scripts/setup.sh
echo "[demo] setup: $(( $(date +%s) - demo_start )) s"
# Real PersonaBench / LongMemEval samples (developer machines only; a fresh clone has no ../shared/data): when present,
# `prag materialize` also runs the retrieval evaluation (asset group retrieval_eval).
if [ -z "${PRAG__DATA__REAL_DATA_DIR:-}" ] && [ -d "$PRAG_ROOT/../shared/data" ]; then
  PRAG__DATA__REAL_DATA_DIR="$(cd "$PRAG_ROOT/../shared/data" && pwd)"
  export PRAG__DATA__REAL_DATA_DIR
fi
# One line per stage while it runs (the Dagster event log goes to <home>/dagster/logs and the UI; `prag materialize
# --verbose` prints it too), then the time per stage, where to look next and the verdict; `prag report` prints every
# table.
"$PRAG_VENV/bin/prag" materialize
