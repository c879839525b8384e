"""The repository is self-contained: nothing in it reads the folder beside it.

CI clones the repository with the project's shared folder next to it, so a test that still
read `../shared` would pass there and fail for a user who cloned the repository alone. This
test looks for such paths in every file the suite, the scripts and the benchmarks use.
"""

from __future__ import annotations

import re

from tests.paths import CURSOR_FIXTURES, PROVIDER_FIXTURES, REALCLIENT, REPO

SCANNED = ("src", "tests", "scripts", "bench", ".ci")
SUFFIXES = {".py", ".sh", ".mjs", ".ts", ".toml", ".cfg", ".ini", ""}
# `../shared`, or a path built from a "shared" component: Path(...) / "shared", "shared" / ...
OUTSIDE = re.compile(r"""\.\./shared|/\s*["']shared["']|["']shared["']\s*/""")


def scanned_files() -> list[str]:
    out = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if not path.is_file() or path.suffix not in SUFFIXES:
                continue
            if any(part in (".venv", "__pycache__", "node_modules") for part in path.parts):
                continue
            out.append(str(path.relative_to(REPO)))
    return out


def test_no_file_reads_the_folder_beside_the_repository() -> None:
    files = scanned_files()
    assert "tests/paths.py" in files and "scripts/test" in files  # the scan sees them
    offenders = []
    for name in files:
        if name == "tests/app/test_self_contained.py":
            continue
        text = (REPO / name).read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert offenders == []


def test_the_pattern_catches_the_old_forms() -> None:
    for line in (
        'SHARED = Path(__file__).resolve().parents[2].parent / "shared"',
        "bash ../shared/realclient/setup.sh",
        "x = 'shared' / 'fixtures'",
    ):
        assert OUTSIDE.search(line), line
    assert not OUTSIDE.search('db = tmp_path / "shared.db"')


def test_fixtures_and_the_real_client_live_in_the_repository() -> None:
    assert (CURSOR_FIXTURES / "INDEX.md").is_file()
    assert len(list(CURSOR_FIXTURES.glob("ide-run-request-*.jsonl"))) == 5
    assert (PROVIDER_FIXTURES / "INDEX.md").is_file()
    assert {p.name for p in PROVIDER_FIXTURES.iterdir() if p.is_dir()} == {
        "anthropic",
        "gemini",
        "openai-chat",
        "openai-responses",
    }
    for name in ("setup.sh", "drive.ts", "omp-run.sh", "README.md"):
        assert (REALCLIENT / name).is_file(), name
