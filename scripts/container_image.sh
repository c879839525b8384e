#!/usr/bin/env bash
# Builds the Dockerfile's image on a machine that cannot pull a base image: the base is a
# Debian root made locally by mmdebstrap (python3 and its venv module), built by podman with no
# network, pip reading a local wheelhouse. Also checks that .dockerignore keeps a serving
# checkout's secrets and database out of the build context.
#
#   scripts/container_image.sh [TAG]        (default TAG: localhost/cursor-byok:local)
#
# Needs podman, runc and mmdebstrap (Debian: apt-get install podman runc mmdebstrap). Exit 77
# when one is missing (tests/deploy/test_container.py reports that as a skip). Cached per
# machine under ${CURSOR_BYOK_CACHE:-~/.cache/cursor-byok}/container: the Debian root
# (scripts/debian_root.sh: about 70 s to make the first time, through the Debian mirror; a
# broken one is made again) and the wheelhouse (the `postgres` extra included).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
tag=${1:-localhost/cursor-byok:local}
base=localhost/cursor-byok-base:bookworm
say() { printf '== %s\n' "$*" >&2; }

for tool in podman runc mmdebstrap; do
  if ! command -v "$tool" >/dev/null; then
    echo "container_image: $tool is not installed (apt-get install podman runc mmdebstrap)" >&2
    exit 77
  fi
done
# shellcheck source=scripts/podman_env.sh
source scripts/podman_env.sh

cache=${CURSOR_BYOK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cursor-byok}/container
mkdir -p "$cache"

if ! podman image exists "$base"; then
  root=$(scripts/debian_root.sh "$cache")
  say "importing it as $base"
  if ! podman import --change 'CMD ["/bin/bash"]' "$root" "$base" >/dev/null; then
    rm -f "$root"  # the next run makes it again rather than failing the same way
    echo "container_image: podman import $root failed (see above); removed it" >&2
    exit 1
  fi
fi

# The wheels of every dependency and of the build backend, made by the host's pip (its index),
# so that the build itself needs no network. Remade when pyproject.toml changes.
wheels=$cache/wheels
stamp=$(sha256sum pyproject.toml | cut -c1-16)
if [ "$(cat "$wheels/.stamp" 2>/dev/null)" != "$stamp" ]; then
  say "collecting the dependencies' wheels"
  rm -rf "$wheels" && mkdir -p "$wheels"
  python3 -m pip wheel -q --wheel-dir "$wheels" "$repo[postgres]" >&2
  rm -f "$wheels"/cursor_byok-*.whl
  python3 -m pip download -q --dest "$wheels" 'setuptools>=77' >&2
  echo "$stamp" >"$wheels/.stamp"
fi

# A build context as a serving checkout would have it: the tree's files plus a configuration
# with secrets, a database with its WAL, an .env file and a TLS key.
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
git ls-files -co --exclude-standard -z | tar -cf - --null -T - | tar -xf - -C "$context"
decoys=(cursor-byok.toml cursor-byok.db cursor-byok.db-wal cursor-byok.db-shm .env
  server.key deploy/cursor-byok.env src/cursor_byok/left-behind.db config/config.toml)
for decoy in "${decoys[@]}"; do
  mkdir -p "$context/$(dirname "$decoy")"
  echo 'auth_token = "decoy-secret-must-not-be-in-the-context"' >"$context/$decoy"
done

say "checking what .dockerignore lets into the build context"
printf 'FROM %s\nCOPY . /context\n' "$base" >"$cache/Containerfile.context"
podman build -q --network none -f "$cache/Containerfile.context" -t localhost/cursor-byok-context:check \
  "$context" >/dev/null
listing=$(podman run --rm --network none localhost/cursor-byok-context:check \
  sh -c 'cd /context && find . -type f | sort')
secrets=$(podman run --rm --network none localhost/cursor-byok-context:check \
  sh -c 'grep -rl decoy-secret /context || true')
podman rmi -f localhost/cursor-byok-context:check >/dev/null
leaked=$(grep -E '\.db|\.env|\.key|cursor-byok\.toml|config\.toml' <<<"$listing" || true)
if [ -n "$leaked$secrets" ]; then
  echo "container_image: the build context holds what it must not:" >&2
  printf '%s\n' "$leaked" "$secrets" >&2
  exit 1
fi
for needed in ./pyproject.toml ./README.md ./LICENSE ./deploy/healthcheck.py \
  ./src/cursor_byok/cli.py ./src/cursor_byok/store/migrations/0001_initial.sql; do
  grep -qxF "$needed" <<<"$listing" || { echo "container_image: $needed missing" >&2; exit 1; }
done
echo "build context: $(wc -l <<<"$listing") files, none of the ${#decoys[@]} decoys" >&2

say "building $tag (no network; pip reads the wheelhouse)"
start=$(date +%s)
podman build -q --format docker --network none \
  --volume "$wheels:/wheelhouse:ro" \
  --build-arg PYTHON_IMAGE="$base" \
  --build-arg PIP_NO_INDEX=1 \
  --build-arg PIP_FIND_LINKS=/wheelhouse \
  -t "$tag" "$context" >/dev/null
echo "built $tag in $(($(date +%s) - start)) s" >&2
echo "$tag"
