# Sourced by prag's scripts: the venv, the prag home and the Dagster instance folders.
PRAG_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PRAG_HOME="${PRAG_HOME:-$PRAG_ROOT/.prag}"
export DAGSTER_HOME="$PRAG_ROOT"            # dagster.yaml lives at the project root
export PRAG_DAGSTER_STORAGE="$PRAG_HOME/dagster"
export PRAG_DAGSTER_LOGS="$PRAG_HOME/dagster/logs"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export GX_ANALYTICS_ENABLED=false MLFLOW_DISABLE_TELEMETRY=true DAGSTER_DISABLE_TELEMETRY=true
export PRAG_VENV="${PRAG_VENV:-$PRAG_ROOT/.venv}"
mkdir -p "$PRAG_DAGSTER_STORAGE" "$PRAG_DAGSTER_LOGS"
