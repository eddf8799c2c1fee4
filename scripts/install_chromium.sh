#!/usr/bin/env bash
# Install headless Chromium for tests/test_ui.py (Debian package). Idempotent: does nothing when it is installed.
# CI calls it before scripts/test.sh; without it the UI tests skip with a reason.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
    echo "install_chromium.sh: not root and no sudo: cannot install chromium (the UI tests will skip)" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-liberation
/usr/bin/chromium --version
