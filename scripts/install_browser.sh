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

echo "install_browser: $BROWSER missing; installing Debian's $PACKAGE" >&2
# shellcheck source=scripts/apt_install.sh
source "$(dirname "$0")/apt_install.sh"
apt_install "$PACKAGE"
echo "install_browser: installed $("$BROWSER" --version 2>/dev/null || echo "$PACKAGE")" >&2
