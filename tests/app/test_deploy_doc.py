"""docs/deploy.md tells the truth: its cursor-byok commands and options exist, its
configurations parse, the files it names are there and say what it says about them.

The container itself is built and run by tests/deploy/test_container.py (opt-in, podman)."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from cursor_byok.cli import _parser
from cursor_byok.config import parse_config
from tests.paths import REPO

DOC = (REPO / "docs" / "deploy.md").read_text()
# Commands the doc may describe ahead of their code (none today): checked once they exist.
PENDING: set[str] = set()
# Words after `cursor-byok` that are not subcommands: the user or container of that name.
DEPLOY_FILES = ("Dockerfile", ".dockerignore", "deploy/compose.yaml", "deploy/cursor-byok.service")
NOT_SUBCOMMANDS = {"sh", "sqlite3", "env", "cursor-byok"}
_SEPARATORS = re.compile(r"[;|&<>'\"`]")


def code_of_doc() -> list[str]:
    """The doc's shell code: indented lines outside fences, and inline code spans."""
    without_fences = re.sub(r"```.*?```", "", DOC, flags=re.S)
    lines = re.findall(r"^ {4,}(\S.*)$", without_fences, flags=re.M)
    spans = re.findall(r"`([^`\n]+)`", without_fences)
    return lines + spans


def invocations() -> list[list[str]]:
    """Each `cursor-byok WORD ...` in the doc's code, as the words up to a shell separator."""
    found = []
    for code in code_of_doc():
        for m in re.finditer(r"(?:^|(?<=[\s/]))cursor-byok(?=\s)(?=(.*))", code):
            rest = _SEPARATORS.split(m.group(1), maxsplit=1)[0]
            found.append(shlex.split(rest.replace("\\", "")))
    return found


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def test_the_doc_runs_real_subcommands_with_real_options() -> None:
    seen: set[str] = set()
    for words in invocations():
        # The image's name before `.` or an option, the user's name before a program.
        if not words or not re.fullmatch(r"[a-z][a-z-]*", words[0]):
            continue
        if words[0] in NOT_SUBCOMMANDS:
            continue
        parser = _parser()
        choices = subcommands(parser)
        if words[0] in PENDING and words[0] not in choices:
            seen.add(words[0])
            continue
        assert words[0] in choices, f"docs/deploy.md runs `cursor-byok {' '.join(words)}`"
        seen.add(words[0])
        parser = choices[words[0]]
        rest = words[1:]
        # Nested subcommands (`token add`), once they exist.
        while rest and rest[0] in subcommands(parser):
            parser = subcommands(parser)[rest[0]]
            rest = rest[1:]
        for word in rest:
            if word.startswith("--"):
                assert word.split("=")[0] in options(parser), (
                    f"`cursor-byok {' '.join(words)}`: no option {word}"
                )
    assert {"init", "doctor", "token"} <= seen


def test_the_doc_finds_the_commands_it_checks() -> None:
    """The extraction itself: a misspelt subcommand or option would be caught."""
    words = invocations()
    assert ["doctor", "--config", "/etc/cursor-byok/config.toml"] in words
    assert ["init", "/out/config.toml"] in words
    assert ["token", "add", "alice", "--models", "gpt-5", "--budget-usd", "50", "--rpm", "30"] in (
        words
    )


@pytest.mark.parametrize(
    "block",
    [b for b in re.findall(r"```toml\n(.*?)```", DOC, flags=re.S)],
    ids=lambda b: b.splitlines()[1].split("=")[0].strip(),
)
def test_each_toml_block_parses(block: str) -> None:
    config = parse_config(block, env={})
    if config.server.host == "0.0.0.0":
        assert config.server.auth_token


def test_the_files_it_names_exist() -> None:
    for target in re.findall(r"\]\(\.\./([^)#]+)\)", DOC):
        assert (REPO / target).is_file(), target
    for path in DEPLOY_FILES:
        assert (REPO / path).is_file(), path


def test_the_dockerfile_is_as_described() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.12-slim-bookworm$", dockerfile, re.M)
    assert re.search(r"^USER 10001:10001$", dockerfile, re.M)
    assert 'VOLUME ["/etc/cursor-byok", "/var/lib/cursor-byok"]' in dockerfile
    assert "CURSOR_BYOK_CONFIG=/etc/cursor-byok/config.toml" in dockerfile
    assert re.search(r"^HEALTHCHECK .*\n\s+CMD .*healthcheck\.py", dockerfile, re.M)
    assert 'ENTRYPOINT ["cursor-byok"]' in dockerfile and 'CMD ["serve"]' in dockerfile
    # The wheel is installed, not the tree: pip install from the wheels only.
    assert "pip install --no-index --find-links /tmp/wheels 'cursor-byok[postgres]'" in dockerfile
    assert "-e ." not in dockerfile


def test_every_file_the_dockerfile_and_the_deploy_files_name_exists() -> None:
    """The Dockerfile once sent readers to scripts/container_check.sh, which never existed."""
    named = set()
    for name in DEPLOY_FILES:
        text = (REPO / name).read_text()
        named |= set(
            re.findall(r"(?<![\w/.-])((?:scripts|docs|deploy|tests|bench)/[\w./-]*\w)", text)
        )
    assert "scripts/container_image.sh" in named and "docs/deploy.md" in named
    made_by_the_user = ("deploy/config/", "deploy/.env")  # docs/deploy.md; git-ignored
    missing = sorted(
        n for n in named if not (REPO / n).exists() and not n.startswith(made_by_the_user)
    )
    assert missing == []


def test_the_unit_and_compose_file_are_as_described() -> None:
    unit = (REPO / "deploy" / "cursor-byok.service").read_text()
    assert "ExecStart=/opt/cursor-byok/bin/cursor-byok serve\n" in unit
    assert "User=cursor-byok\n" in unit and "StateDirectory=cursor-byok\n" in unit
    assert "RestartPreventExitStatus=2\n" in unit
    compose = (REPO / "deploy" / "compose.yaml").read_text()
    for needed in (
        "image: postgres:17-bookworm",
        "pg_isready -U cursor_byok -d cursor_byok",
        "condition: service_healthy",
        "PGPASSWORD: ${POSTGRES_PASSWORD",
        "- ./config:/etc/cursor-byok:ro",
        "- cursor-byok-data:/var/lib/cursor-byok",
    ):
        assert needed in compose, needed
    assert "postgresql://cursor_byok@postgres:5432/cursor_byok" in DOC


def test_every_doc_block_names_a_path_that_the_image_uses() -> None:
    assert "/var/lib/cursor-byok/cursor-byok.db" in DOC
    healthcheck = (REPO / "deploy" / "healthcheck.py").read_text()
    assert 'DEFAULT_URL = "http://127.0.0.1:8700/healthz"' in healthcheck
    assert "CURSOR_BYOK_HEALTH_URL" in healthcheck and "CURSOR_BYOK_HEALTH_URL" in DOC


def _ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path, or a folder above it, decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for negated, pattern in rules:
        if any(pattern.fullmatch(p) for p in prefixes):
            verdict = not negated
    return verdict


def _rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        glob = line.lstrip("!").rstrip("/")
        regex = ""
        i = 0
        while i < len(glob):
            if glob.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif glob[i] == "*":
                regex += "[^/]*"
                i += 1
            elif glob[i] == "?":
                regex += "[^/]"
                i += 1
            elif glob[i] == "[":
                end = glob.index("]", i)
                regex += glob[i : end + 1]
                i = end + 1
            else:
                regex += re.escape(glob[i])
                i += 1
        rules.append((negated, re.compile(regex)))
    return rules


def test_dockerignore_keeps_secrets_and_the_database_out() -> None:
    rules = _rules((REPO / ".dockerignore").read_text())
    for kept_out in (
        "cursor-byok.toml",
        "cursor-byok.db",
        "cursor-byok.db-wal",
        "cursor-byok.db-shm",
        ".env",
        "deploy/.env",
        "deploy/config/config.toml",
        "server.key",
        "tls/fullchain.pem",
        "src/cursor_byok/left.db",
        "src/cursor_byok/secrets.toml",
        "src/cursor_byok/__pycache__/x.cpython-311.pyc",
        ".git/config",
        ".venv/bin/python",
        "tests/app/test_cli.py",
        "dist/cursor_byok-0.1.0-py3-none-any.whl",
    ):
        assert _ignored(kept_out, rules), kept_out
    for needed in (
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "src/cursor_byok/cli.py",
        "src/cursor_byok/store/migrations/0001_initial.sql",
        "src/cursor_byok/observability/dashboard.html",
        "deploy/healthcheck.py",
    ):
        assert not _ignored(needed, rules), needed
    # Everything the Dockerfile copies is let in.
    for copied in re.findall(r"^COPY (?!--from)(.+) \S+$", (REPO / "Dockerfile").read_text(), re.M):
        for source in copied.split():
            assert not _ignored(source.rstrip("/"), rules), source


def test_the_matcher_follows_docker_order() -> None:
    rules = _rules("*\n!src/\n**/*.db\n")
    assert _ignored("x.txt", rules) and not _ignored("src/a.py", rules)
    assert _ignored("src/a.db", rules) and _ignored("src", _rules("src\n"))


def test_package_data_is_not_kept_out() -> None:
    """The wheel's package data (pyproject's patterns) lies under src/: none of it ignored."""
    rules = _rules((REPO / ".dockerignore").read_text())
    data = [p for p in (REPO / "src").rglob("*") if p.suffix in (".sql", ".proto", ".html")]
    assert data
    for path in data:
        assert not _ignored(str(path.relative_to(REPO)), rules), path
