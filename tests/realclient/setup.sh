#!/usr/bin/env bash
# Installs a real third-party Cursor agent-protocol client (oh-my-pi's Cursor provider and its
# `omp` coding agent, run on Bun) into a cache folder, once. Idempotent; prints the folder.
#
#   dir=$(tests/realclient/setup.sh)      # ~35 s and ~1 GB the first time, instant afterwards
#
# REALCLIENT_DIR overrides the folder (default: $HOME/.cache/cursor-realclient).
# Versions are pinned: 18.2.3 is the newest set whose sibling packages all exist in the registry.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${REALCLIENT_DIR:-$HOME/.cache/cursor-realclient}"
pins="bun@1.3.14 @oh-my-pi/pi-ai@18.2.3 @oh-my-pi/pi-coding-agent@18.2.3"
mkdir -p "$dir"
# Test workers (pytest -n) may start this at the same moment: one installs, the others wait.
exec 9>"$dir/.lock"
flock 9
if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$pins" ]; then
  (cd "$dir" && { [ -f package.json ] || npm init -y >/dev/null; } \
     && npm install --no-audit --no-fund --loglevel=error $pins >&2)
  echo "$pins" > "$dir/.installed"
fi
# Scripts live beside node_modules so Bun resolves the packages from there.
cp "$here/drive.ts" "$here/omp-run.sh" "$dir/"
chmod +x "$dir/omp-run.sh"
echo "$dir"
