"""The repository is self-contained: nothing in it reads the folder beside it.

CI clones the repository with the project's common folder next to it, so a test that still
read that folder would pass there and fail for a user who cloned the repository alone. This
test looks for such paths in every file the suite, the scripts and the benchmarks use, itself
included: its patterns and samples are assembled from parts, so no line of it is such a path.
"""

from __future__ import annotations

import re

from tests.paths import CURSOR_FIXTURES, PROVIDER_FIXTURES, REALCLIENT, REPO

SCANNED = ("src", "tests", "scripts", "bench", ".ci")
SUFFIXES = {".py", ".sh", ".mjs", ".ts", ".toml", ".cfg", ".ini", ""}
# The folder beside the repository, as a relative path or a path component: `<up>/<name>`,
# Path(...) / "<name>", "<name>" / ...
NAME = "sh" + "ared"
UP = "." + "./"
OUTSIDE = re.compile(re.escape(UP + NAME) + rf"""|/\s*["']{NAME}["']|["']{NAME}["']\s*/""")


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
        text = (REPO / name).read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert offenders == []


def test_the_pattern_catches_the_old_forms() -> None:
    for line in (
        f'BESIDE = Path(__file__).resolve().parents[2].parent / "{NAME}"',
        f"bash {UP}{NAME}/realclient/setup.sh",
        f"x = '{NAME}' / 'fixtures'",
    ):
        assert OUTSIDE.search(line), line
    assert not OUTSIDE.search(f'db = tmp_path / "{NAME}.db"')


def test_fixtures_and_the_real_client_live_in_the_repository() -> None:
    assert (CURSOR_FIXTURES / "INDEX.md").is_file()
    assert len(list(CURSOR_FIXTURES.glob("ide-run-request-*.jsonl"))) == 5
    assert (PROVIDER_FIXTURES / "INDEX.md").is_file()
    assert {p.name for p in PROVIDER_FIXTURES.iterdir() if p.is_dir()} == {
        "anthropic",
        "gemini",
        "llama-server",  # its /props and context-size answer (INDEX.md), not streams
        "openai-chat",
        "openai-responses",
    }
    for name in ("setup.sh", "drive.ts", "omp-run.sh", "README.md"):
        assert (REALCLIENT / name).is_file(), name
