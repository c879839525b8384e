#!/usr/bin/env bash
# Install the headless browser used by tests/observability/test_dashboard_browser.py.
# Idempotent: does nothing when /usr/bin/chromium already exists. Needs root (or sudo) for apt.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    echo "install_browser: /usr/bin/chromium present ($(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown')); nothing to do" >&2
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
echo "install_browser: /usr/bin/chromium missing; running: ${SUDO:+$SUDO }apt-get update && apt-get install -y chromium" >&2
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y chromium
echo "install_browser: installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)" >&2
