#!/usr/bin/env bash
# Start the Dagster UI with prag's instance (dagster.yaml) and home, on the port of run.dagster_ui_url (default
# http://127.0.0.1:3000), where the links MLflow runs hold point. PORT=... starts it elsewhere (set
# PRAG__RUN__DAGSTER_UI_URL to match, or those links break). PRAG_UI_DRY_RUN=1 prints the command instead.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
source scripts/run_settings.sh   # the PRAG__ settings the home's last run had (issue 50)
source scripts/real_data.sh   # the configuration scripts/demo.sh ran with (no asset "Unsynced" by a setting alone)
configured="$("$PRAG_VENV/bin/python" -m prag_assets.cli.ui_port dagster)"
port="${PORT:-$configured}"
if [ "$port" != "$configured" ]; then
  echo "[prag] the Dagster UI on port $port, but links point to port $configured (run.dagster_ui_url)" >&2
fi
cmd=("$PRAG_VENV/bin/dagster" dev -w workspace.yaml -h 127.0.0.1 -p "$port")
if [ -n "${PRAG_UI_DRY_RUN:-}" ]; then echo "${cmd[*]}"; exit 0; fi
exec "${cmd[@]}"
