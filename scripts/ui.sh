#!/usr/bin/env bash
# Start the Dagster UI on http://127.0.0.1:3000 with prag's instance (dagster.yaml) and home.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
source scripts/real_data.sh   # the configuration scripts/demo.sh ran with (no asset "Unsynced" by a setting alone)
exec "$PRAG_VENV/bin/dagster" dev -w workspace.yaml -h 127.0.0.1 -p "${PORT:-3000}"
