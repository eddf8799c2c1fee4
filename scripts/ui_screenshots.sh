#!/usr/bin/env bash
# Screenshots of the Dagster and MLflow UIs over the prag home (the pictures of docs/tutorial/uis.md): starts the
# Dagster webserver (no daemon: nothing is launched) and the MLflow UI on local ports, renders each page with headless
# Chromium (scripts/install_chromium.sh) and stops both.
#   bash scripts/ui_screenshots.sh OUT_DIR NAME=dagster:/runs NAME=mlflow:/#/experiments/1?workflowType=machine_learning
# writes OUT_DIR/NAME.png for each page (WIDTH x HEIGHT, default 1400 x 900).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
out="$1"; shift
mkdir -p "$out"
work="$(mktemp -d)"
dport="${DAGSTER_PORT:-3900}"; mport="${MLFLOW_PORT:-5900}"
export PATH="$PRAG_VENV/bin:$PATH"
"$PRAG_VENV/bin/dagster-webserver" -w workspace.yaml -h 127.0.0.1 -p "$dport" > "$work/dagster.log" 2>&1 &
dpid=$!
"$PRAG_VENV/bin/mlflow" ui --backend-store-uri "sqlite:///$PRAG_HOME/mlflow.db" -h 127.0.0.1 -p "$mport" \
  > "$work/mlflow.log" 2>&1 &
mpid=$!
trap 'kill $dpid $mpid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
for url in "http://127.0.0.1:$dport/server_info" "http://127.0.0.1:$mport/health"; do
  for _ in $(seq 1 240); do curl -sf "$url" > /dev/null && break; sleep 1; done
done
sleep 5  # the code location loads after the server answers
for page in "$@"; do
  name="${page%%=*}"; target="${page#*=}"
  case "$target" in
    dagster:*) url="http://127.0.0.1:$dport${target#dagster:}" ;;
    mlflow:*) url="http://127.0.0.1:$mport/${target#mlflow:}" ;;
    *) echo "ui_screenshots.sh: $page: the page must start with dagster: or mlflow:" >&2; exit 2 ;;
  esac
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --disable-dev-shm-usage --hide-scrollbars \
    --user-data-dir="$work/profile-$name" --window-size="${WIDTH:-1400},${HEIGHT:-900}" \
    --virtual-time-budget="${BUDGET_MS:-30000}" --screenshot="$out/$name.png" "$url" > /dev/null 2>&1
  echo "$out/$name.png <- $url"
done
