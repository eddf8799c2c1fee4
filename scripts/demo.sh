#!/usr/bin/env bash
# Command 1: set up (idempotent) and materialize the whole asset graph on the embedded demo with the packaged
# models, printing each stage as it finishes, then the time per stage, where to look next and the verdict.
set -euo pipefail
demo_start=$(date +%s)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
bash scripts/setup.sh
echo "[demo] setup: $(( $(date +%s) - demo_start )) s"
source scripts/real_data.sh   # ../shared/data where present (the UI sources the same file)
# One line per stage while it runs (the Dagster event log goes to <home>/dagster/logs and the UI; `prag materialize
# --verbose` prints it too), then the time per stage, where to look next and the verdict; `prag report` prints every
# table.
"$PRAG_VENV/bin/prag" materialize
