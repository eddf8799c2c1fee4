#!/usr/bin/env bash
# Start the MLflow UI on the port of mlflow.ui_url (default http://127.0.0.1:5000; PORT=... for another, with a
# warning: links point to mlflow.ui_url) over the prag home's store. Open its
# classic model-training view: http://127.0.0.1:5000/#/experiments/1?workflowType=machine_learning (MLflow 3 opens
# experiments in its GenAI view otherwise). Links from Dagster use mlflow.ui_url; set it when PORT differs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
export PATH="$PRAG_VENV/bin:$PATH"   # mlflow starts uvicorn from PATH
configured="$("$PRAG_VENV/bin/python" -m prag_assets.cli.ui_port mlflow)"   # mlflow.ui_url's port (issue 50.5)
port="${PORT:-$configured}"
if [ "$port" != "$configured" ]; then
  echo "[prag] the MLflow UI on port $port, but links point to port $configured (mlflow.ui_url)" >&2
fi
cmd=("$PRAG_VENV/bin/mlflow" ui --backend-store-uri "sqlite:///$PRAG_HOME/mlflow.db" -h 127.0.0.1 -p "$port")
if [ -n "${PRAG_UI_DRY_RUN:-}" ]; then echo "${cmd[*]}"; exit 0; fi
"$PRAG_VENV/bin/python" -m prag_assets.cli relocate   # a moved or copied home shows its own artifacts (issue 50.5)
exec "${cmd[@]}"
