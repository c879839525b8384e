"""scripts/debian_root.sh, the base of scripts/container_image.sh: it asks mmdebstrap for a
tarball in so many words and recovers from a broken cache.

mmdebstrap 1.3.5 (Debian 12) infers the output format from the target's name and makes a
directory for one that does not end in .tar; the script once wrote `bookworm.tar.part`, got a
directory, renamed it `bookworm.tar`, and `podman import` failed with "is a directory" on that
run and every later one. Here an mmdebstrap that decides the format as 1.3.5 does (its
FORMATS section) stands in for the real one, which needs the Debian mirror and about 100 s;
the real one runs in tests/deploy/test_container.py (opt-in) and as the closing note of issue
26 records.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.paths import REPO

SCRIPT = REPO / "scripts" / "debian_root.sh"

# Formats as mmdebstrap 1.3.5 picks them: --format wins; auto is tar for a name ending in .tar
# (or a compressed one), a directory for an existing directory or any other name.
STAND_IN = """#!/usr/bin/env python3
import os, sys, tarfile, io, pathlib
calls = pathlib.Path(os.environ["MMDEBSTRAP_CALLS"])
calls.write_text(calls.read_text() + " ".join(sys.argv[1:]) + "\\n" if calls.exists() else
                 " ".join(sys.argv[1:]) + "\\n")
if os.environ.get("MMDEBSTRAP_FAIL"):
    print("E: the mirror did not answer", file=sys.stderr)
    sys.exit(1)
args = sys.argv[1:]
fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "auto")
positional = [a for a in args if not a.startswith("-")]
target = pathlib.Path(positional[1])
files = ["./usr/bin/python3", "./usr/lib/python3.11/ensurepip/__init__.py"]
if fmt == "auto":
    tar_names = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.zst")
    fmt = "dir" if target.is_dir() or not target.name.endswith(tar_names) else "tar"
if fmt in ("dir", "directory"):
    for name in files:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text("")
else:
    with tarfile.open(target, "w") as tar:
        for name in files:
            info = tarfile.TarInfo(name)
            tar.addfile(info, io.BytesIO(b""))
"""


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    stand_in = folder / "mmdebstrap"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    return folder


def make_root(
    cache: Path, tools: Path, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    calls = cache.parent / "calls.txt"
    calls.unlink(missing_ok=True)
    environment = {
        **os.environ,
        "PATH": f"{tools}:{os.environ['PATH']}",
        "MMDEBSTRAP_CALLS": str(calls),
        **env,
    }
    result = subprocess.run(
        [str(SCRIPT), str(cache)], env=environment, capture_output=True, text=True, timeout=60
    )
    return result, calls.read_text().splitlines() if calls.exists() else []


def whole_root(path: Path) -> None:
    assert path.is_file(), path
    with tarfile.open(path) as tar:
        assert "./usr/bin/python3" in tar.getnames()


def test_a_fresh_cache_gets_a_tarball_made_once(tmp_path: Path, tools: Path) -> None:
    cache = tmp_path / "cache"
    result, calls = make_root(cache, tools)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(cache / "bookworm.tar")
    whole_root(cache / "bookworm.tar")
    assert len(calls) == 1 and calls[0].startswith("--format=tar ")
    assert sorted(p.name for p in cache.iterdir()) == ["bookworm.tar"]  # no temporary left
    again, calls = make_root(cache, tools)
    assert again.returncode == 0 and calls == []  # cached: mmdebstrap is not run again


@pytest.mark.parametrize(
    "broken",
    ["directory", "empty file", "truncated tarball", "tarball without python3", "dangling link"],
)
def test_a_broken_cache_is_made_again(tmp_path: Path, tools: Path, broken: str) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    root = cache / "bookworm.tar"
    if broken == "directory":  # what the old script left: mmdebstrap's directory, renamed
        (root / "usr" / "bin").mkdir(parents=True)
        (cache / "bookworm.tar.part" / "etc").mkdir(parents=True)
    elif broken == "empty file":
        root.touch()
    elif broken == "truncated tarball":
        make_root(cache, tools)
        root.write_bytes(root.read_bytes()[:700])
    elif broken == "tarball without python3":
        with tarfile.open(root, "w") as tar:
            tar.add(SCRIPT, arcname="./etc/os-release")
    else:
        root.symlink_to(cache / "nowhere.tar")
    result, calls = make_root(cache, tools)
    assert result.returncode == 0, result.stderr
    assert "not a usable tarball" in result.stderr
    assert len(calls) == 1
    whole_root(root)
    assert not (cache / "bookworm.tar.part").exists()


def test_a_failed_mmdebstrap_leaves_nothing_that_breaks_the_next_run(
    tmp_path: Path, tools: Path
) -> None:
    cache = tmp_path / "cache"
    result, calls = make_root(cache, tools, MMDEBSTRAP_FAIL="1")
    assert result.returncode == 1 and len(calls) == 1
    assert "mmdebstrap failed" in result.stderr
    assert list(cache.iterdir()) == []
    result, calls = make_root(cache, tools)
    assert result.returncode == 0 and len(calls) == 1
    whole_root(cache / "bookworm.tar")


def test_container_image_uses_it_and_drops_a_root_podman_cannot_import() -> None:
    script = (REPO / "scripts" / "container_image.sh").read_text()
    assert 'root=$(scripts/debian_root.sh "$cache")' in script
    assert 'rm -f "$root"' in script
