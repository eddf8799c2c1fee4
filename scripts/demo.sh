#!/usr/bin/env bash
# Command 1: set up (idempotent) and materialize the whole asset graph on the embedded demo with the packaged
# models, then print the evaluation table and where to look.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
bash scripts/setup.sh
# Real PersonaBench / LongMemEval samples (developer machines only; a fresh clone has no ../shared/data): when present,
# `prag materialize` also runs the retrieval evaluation (asset group retrieval_eval).
if [ -z "${PRAG__DATA__REAL_DATA_DIR:-}" ] && [ -d "$PRAG_ROOT/../shared/data" ]; then
  PRAG__DATA__REAL_DATA_DIR="$(cd "$PRAG_ROOT/../shared/data" && pwd)"
  export PRAG__DATA__REAL_DATA_DIR
fi
start=$(date +%s)
"$PRAG_VENV/bin/prag" materialize
"$PRAG_VENV/bin/prag" report
echo "[demo] wall time: $(( $(date +%s) - start )) s"
