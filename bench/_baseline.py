"""The pinned baseline server of bench/regression_guard.py: read bench/BASELINE, install it.

Not a benchmark (its name starts with `_`). The baseline runs from its own clone and its own
virtual environment, built once per commit and kept in a cache folder:

    $CURSOR_BYOK_BENCH_CACHE (default ~/.cache/cursor-byok/bench-baseline)/<commit>/
        repo/    git clone --no-hardlinks of this repository, checked out at the commit
        venv/    python -m venv; pip install ./repo (non-editable: the clone is the source)
        ready    written last: a half-built folder is rebuilt, never used

Offline once cached: the clone is local (no remote is contacted) and pip installs from what
it already has (its cache, its configured local indexes and wheel folders); nothing else is
downloaded. `python bench/_baseline.py [REF]` prepares (or finds) it and prints the
interpreter's path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE_FILE = REPO / "bench" / "BASELINE"


@dataclass(frozen=True)
class Baseline:
    commit: str  # full hash
    short: str
    python: Path  # the venv's interpreter, with the baseline installed
    root: Path  # the cache folder of this commit


def pinned(path: Path = BASELINE_FILE) -> str:
    """The commit named by bench/BASELINE: the first word of its first non-comment line."""
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return line.split()[0]
    raise ValueError(f"{path} names no commit")


def cache_root() -> Path:
    env = os.environ.get("CURSOR_BYOK_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "cursor-byok" / "bench-baseline"


def _git(*args: str, cwd: Path = REPO) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _say(text: str) -> None:
    print(f"baseline: {text}", file=sys.stderr, flush=True)


def prepare(ref: str | None = None) -> Baseline:
    """The baseline of `ref` (default: bench/BASELINE), built if it is not in the cache yet."""
    ref = ref or pinned()
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    root = cache_root() / commit
    python = root / "venv" / "bin" / "python"
    baseline = Baseline(commit, commit[:7], python, root)
    if (root / "ready").exists() and python.exists():
        return baseline
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    _say(f"cloning {commit[:7]} into {root / 'repo'}")
    _git("clone", "-q", "--no-hardlinks", "--no-checkout", str(REPO), str(root / "repo"))
    _git("-c", "advice.detachedHead=false", "checkout", "-q", commit, cwd=root / "repo")
    _say("creating its venv and installing it (pip, from what pip already has)")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, str(root / "repo")], check=True)
    (root / "ready").write_text(commit + "\n", encoding="utf-8")
    return baseline


def main(argv: list[str]) -> int:
    baseline = prepare(argv[0] if argv else None)
    print(baseline.python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
