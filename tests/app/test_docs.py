"""The documentation a newcomer reads resolves: README.md, CHANGELOG.md and docs/.

Every relative link points at a file of the repository (and at a heading of it, for a link
with an anchor), every repository path named in a code span exists, and nothing cites a file
outside the repository: a reference kept elsewhere is named by its title and section (docs/
architecture.md, "References"), never by a path a clone does not have.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path

import pytest

from tests.paths import REPO

DOCS = sorted(
    [REPO / "README.md", REPO / "CHANGELOG.md", *(REPO / "docs").glob("*.md")],
    key=lambda p: p.as_posix(),
)
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\((?P<target>[^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
# Top-level folders and files of the repository a path in the docs may start with.
TOP = ("src/", "tests/", "scripts/", "docs/", "bench/", "deploy/", ".ci/")
# The folder beside the repository and its research notes (never in a clone); the folder's name
# is assembled, so no line here is such a path (tests/app/test_self_contained.py).
NOTES = "sh" + "ared"
OUTSIDE_FOLDER = "." + "./" + NOTES
OUTSIDE_NAMES = (
    "cursor-agent-protocol.md",
    "cursor-native-tools.md",
    "loop-dialect-design",
    "llm-providers.md",
    "stack.md",
)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _prose(text: str) -> str:
    """The text without fenced code blocks (their contents are examples, not links)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = unicodedata.normalize("NFC", text).lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ " or unicodedata.category(c) == "Mn")
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    found: list[str] = []
    seen: dict[str, int] = {}
    for line in _prose(_text(path)).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.append(base if n == 0 else f"{base}-{n}")
    found += re.findall(r'<a\s+(?:name|id)="([^"]+)"', _text(path))
    return frozenset(found)


@cache
def tracked() -> frozenset[str]:
    """Every file a commit of this work tree would hold (tracked or new, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    return frozenset(name for name in listed.split("\0") if name and (REPO / name).exists())


def _exists_in_repo(relative: str) -> bool:
    """A file or folder a clone holds (not merely one this machine happens to have)."""
    name = relative.rstrip("/")
    return name in tracked() or any(f.startswith(name + "/") for f in tracked())


def _made_at_run_time(relative: str) -> bool:
    """A path the repository ignores: one a user or a test makes (deploy/.env, tests/artifacts/)."""
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", relative], cwd=REPO, timeout=30, check=False
    )
    return ignored.returncode == 0


def link_problems(path: Path) -> list[str]:
    problems = []
    text = _prose(_text(path))
    targets = [m.group("target") for m in LINK.finditer(text)]
    targets += [m.group("target") for m in IMAGE.finditer(text)]
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        where = path if not file_part else (path.parent / file_part).resolve()
        shown = f"{path.relative_to(REPO)}: ({target})"
        if where != REPO and REPO not in where.parents:
            problems.append(f"{shown} leaves the repository")
            continue
        if file_part and not _exists_in_repo(where.relative_to(REPO).as_posix()):
            problems.append(f"{shown} is no file of the repository")
            continue
        if anchor and where.suffix == ".md" and anchor not in anchors(where):
            problems.append(f"{shown} names no heading of {where.relative_to(REPO)}")
    return problems


def _path_in_span(span: str) -> str | None:
    """The repository path a code span names, if it names one (no glob, no placeholder)."""
    word = span.strip().split()[0] if span.strip() else ""
    word = re.split(r"::|:(?=\d)", word)[0].rstrip(".,;)")
    if not word.startswith(TOP) or any(c in word for c in "*<>{}$…?[]"):
        return None
    return word


def path_problems(path: Path) -> list[str]:
    problems = []
    for span in CODE_SPAN.findall(_prose(_text(path))):
        named = _path_in_span(span)
        if named is not None and not (_exists_in_repo(named) or _made_at_run_time(named)):
            problems.append(f"{path.relative_to(REPO)}: `{span}` names no file of the repository")
    return problems


def outside_problems(path: Path) -> list[str]:
    problems = []
    for number, line in enumerate(_text(path).splitlines(), 1):
        if OUTSIDE_FOLDER in line or f"/work/{NOTES}" in line:
            problems.append(f"{path.relative_to(REPO)}:{number}: a path outside the repository")
        for name in OUTSIDE_NAMES:
            if name in line:
                problems.append(f"{path.relative_to(REPO)}:{number}: cites {name} by file name")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_link_resolves_inside_the_repository(doc: Path) -> None:
    assert link_problems(doc) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_path_named_exists(doc: Path) -> None:
    assert path_problems(doc) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_nothing_cites_a_file_outside_the_repository(doc: Path) -> None:
    assert outside_problems(doc) == []


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """Each check on a page of broken links, inside the repository's docs folder (so the
    relative links are read as the real pages' are), removed afterwards."""
    page = REPO / "docs" / f"_probe_{tmp_path.name}.md"
    page.write_text(
        "# Probe\n\n"
        "[gone](missing.md) [up](../../elsewhere.md) [bad anchor](deploy.md#no-such-heading)\n"
        "[good](deploy.md) [self](#probe) [site](https://example.invalid/)\n"
        "`src/cursor_byok/no_such_module.py` `src/cursor_byok/cli.py` `tests/app/test_docs.py::x`\n"
        "See " + "../" + "shared/docs/x.md and " + "stack" + ".md §2.\n"
        "```\n[in a fence](nowhere.md) `src/nowhere.py`\n```\n",
        encoding="utf-8",
    )
    try:
        assert link_problems(page) == [
            f"docs/{page.name}: (missing.md) is no file of the repository",
            f"docs/{page.name}: (../../elsewhere.md) leaves the repository",
            f"docs/{page.name}: (deploy.md#no-such-heading) names no heading of docs/deploy.md",
        ]
        assert path_problems(page) == [
            f"docs/{page.name}: `src/cursor_byok/no_such_module.py` names no file of the repository"
        ]
        assert len(outside_problems(page)) == 2
    finally:
        page.unlink()
    assert slug("Limits and deadlines") == "limits-and-deadlines"
    assert slug("Compaction: long conversations, in epochs") == (
        "compaction-long-conversations-in-epochs"
    )
    assert slug("`server.database` (SQLite)") == "serverdatabase-sqlite"


def test_the_schema_version_the_docs_show_is_the_latest() -> None:
    """Example rows of `doctor` show the newest schema, read from the migrations."""
    from cursor_byok.store.migrate import latest_version, load_migrations

    latest = latest_version()
    assert latest_version(load_migrations("postgresql")) == latest
    shown = []
    for name in ("deploy.md", "operations.md"):
        text = _text(REPO / "docs" / name)
        shown += [int(v) for v in re.findall(r"schema v(\d+)", text)]
        shown += [int(v) for v in re.findall(r"\(latest (\d+)\)", text)]
    assert len(shown) >= 4 and set(shown) == {latest}


def test_deploy_names_every_option_of_token_add(capsys: pytest.CaptureFixture[str]) -> None:
    from cursor_byok.cli import main

    with pytest.raises(SystemExit):
        main(["token", "add", "--help"])
    options = set(re.findall(r"(--[a-z][a-z-]+)", capsys.readouterr().out)) - {"--help"}
    text = _text(REPO / "docs" / "deploy.md")
    section = text.split("## Tokens per person", 1)[1].split("\n## ", 1)[0]
    assert options and sorted(o for o in options if f"`{o}`" not in section) == []


def test_clients_shows_the_oh_my_pi_file_the_suite_runs_with() -> None:
    """docs/clients.md's ~/.omp/agent/models.yml is the file tests/realclient/omp-run.sh
    writes for every oh-my-pi run of the suite, for the server's default address."""
    doc = _text(REPO / "docs" / "clients.md")
    block = re.search(r"```yaml\n# ~/\.omp/agent/models\.yml\n(.*?)```", doc, re.S)
    assert block is not None
    script = _text(REPO / "tests" / "realclient" / "omp-run.sh")
    written = re.search(
        r"printf '(providers:[^']*)' \"\$base\" > \"\$home/\.omp/agent/models\.yml\"", script
    )
    assert written is not None
    expected = written.group(1).replace("\\n", "\n") % "http://127.0.0.1:8700"
    assert block.group(1) == expected


def test_the_changelog_keeps_a_changelog() -> None:
    """CHANGELOG.md in the Keep a Changelog form: an Unreleased section first, then releases
    newest first, each with only the standard kinds of change, in their order."""
    text = _text(REPO / "CHANGELOG.md")
    releases = re.findall(r"^## (.+)$", text, re.M)
    assert releases and releases[0] == "Unreleased"
    kinds = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]
    for section in re.split(r"^## .+$", text, flags=re.M)[1:]:
        found = re.findall(r"^### (.+)$", section, re.M)
        assert found and [k for k in kinds if k in found] == found, found
        for kind in found:
            body = section.split(f"### {kind}\n", 1)[1].split("\n### ", 1)[0]
            assert re.search(r"^- \S", body, re.M), kind  # at least one entry
