#!/usr/bin/env bash
# Install the headless browser used by tests/observability/test_dashboard_browser.py: Debian's
# chromium-headless-shell without recommends. The test only renders a page and takes a
# screenshot, so it needs neither the desktop browser nor what it recommends (udev, avahi,
# printing, sound servers, perl): from a machine without Chromium this is 19 packages, about
# 100 MB to download and 306 MB on disk, where `apt-get install chromium` was 115 packages and
# 479 MB. Idempotent: does nothing when /usr/bin/chromium-headless-shell exists. Needs root (or
# sudo) for apt.
set -euo pipefail

BROWSER=/usr/bin/chromium-headless-shell
PACKAGE=chromium-headless-shell

if [ -x "$BROWSER" ]; then
    echo "install_browser: $BROWSER present ($("$BROWSER" --version 2>/dev/null || echo 'version unknown')); nothing to do" >&2
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
echo "install_browser: $BROWSER missing; running: ${SUDO:+$SUDO }apt-get update && apt-get install -y --no-install-recommends $PACKAGE" >&2
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "$PACKAGE"
echo "install_browser: installed $("$BROWSER" --version 2>/dev/null || echo "$PACKAGE")" >&2
