#!/usr/bin/env bash
# Create the venv and install prag with pinned dependencies (idempotent; torch first, CPU build).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PRAG_ROOT"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
stamp="$PRAG_VENV/.prag-installed"
want="$(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[setup] venv up to date ($PRAG_VENV)"; exit 0
fi
[ -x "$PRAG_VENV/bin/python" ] || "$PYTHON" -m venv "$PRAG_VENV"
"$PRAG_VENV/bin/python" -m pip install --quiet --upgrade pip
echo "[setup] installing torch==2.13.0 (CPU) first"
"$PRAG_VENV/bin/pip" install --quiet torch==2.13.0
echo "[setup] installing prag and its pinned dependencies (llama-cpp-python compiles once, ~4 min)"
"$PRAG_VENV/bin/pip" install --quiet -e ".[dev]"
echo "$want" > "$stamp"
echo "[setup] done"
