#!/usr/bin/env bash
# Makes (once) the Debian bookworm root that scripts/container_image.sh imports as its base
# image: a tarball made by mmdebstrap with python3 and its venv module. Prints its path.
#
#   scripts/debian_root.sh CACHE_DIR        -> CACHE_DIR/bookworm.tar
#
# The tarball is written under a temporary name and renamed only once it is whole, and it is
# checked before every use: anything else found there (a directory, an empty or truncated
# file, a tarball without python3) is removed and made again, so a run that was interrupted
# or failed never breaks the next one. The format is given explicitly: mmdebstrap 1.3.5
# (Debian 12) infers it from the file name and writes a directory for a name that does not
# end in .tar, which `podman import` then refuses ("is a directory").
set -euo pipefail
cache=${1:?usage: scripts/debian_root.sh CACHE_DIR}
root=$cache/bookworm.tar
part=$cache/bookworm.part.tar
say() { printf '== %s\n' "$*" >&2; }

# A usable root: a regular file that tar reads to the end, holding python3 and ensurepip
# (what python3-venv adds).
usable() {
  [ -f "$1" ] && [ -s "$1" ] || return 1
  local listing
  listing=$(tar -tf "$1" 2>/dev/null) || return 1
  grep -qx './usr/bin/python3' <<<"$listing" && grep -q '^\./usr/lib/python3\.[0-9]*/ensurepip/' <<<"$listing"
}

mkdir -p "$cache"
if usable "$root"; then
  echo "$root"
  exit 0
fi
if [ -e "$root" ] || [ -L "$root" ]; then
  say "the cached Debian root $root is not a usable tarball (an interrupted or failed run?): making it again"
fi
# Left by an earlier run: this one's temporary file, or the directory an older script made.
rm -rf "$root" "$part" "$cache/bookworm.tar.part"

say "making a Debian bookworm root with mmdebstrap (once per machine, about 70 s)"
mmdebstrap --format=tar --variant=minbase --include=python3,python3-venv,passwd,ca-certificates \
  bookworm "$part" http://deb.debian.org/debian >&2 \
  || { rm -rf "$part"; echo "debian_root: mmdebstrap failed (see above)" >&2; exit 1; }
if ! usable "$part"; then
  rm -rf "$part"
  echo "debian_root: mmdebstrap did not write a tarball with python3 and its venv module" >&2
  exit 1
fi
mv "$part" "$root"
echo "$root"
