#!/usr/bin/env bash
# Start the MLflow UI on http://127.0.0.1:5000 (PORT=... for another port) over the prag home's store. Open its
# classic model-training view: http://127.0.0.1:5000/#/experiments/1?workflowType=machine_learning (MLflow 3 opens
# experiments in its GenAI view otherwise). Links from Dagster use mlflow.ui_url; set it when PORT differs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
export PATH="$PRAG_VENV/bin:$PATH"   # mlflow starts uvicorn from PATH
exec "$PRAG_VENV/bin/mlflow" ui --backend-store-uri "sqlite:///$PRAG_HOME/mlflow.db" -h 127.0.0.1 -p "${PORT:-5000}"
