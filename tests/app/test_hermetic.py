"""No test reads the real working directory, home, $XDG_CONFIG_HOME or environment.

The README's order (scripts/serve, then scripts/test) once failed the suite: scripts/serve
writes ./cursor-byok.toml, and a configuration test that expected none found it. The autouse
fixture of tests/conftest.py (tests/hermetic.py) gives each test its own empty working
directory and home and clears CURSOR_* variables, provider keys and proxies. Here the
configuration tests run in a subprocess started inside a poisoned directory, home and
environment; they must pass, and without the fixture (`--noconftest`) the poison must bite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cursor_byok.config import LOCAL_CONFIG, parse_config
from cursor_byok.starter_config import starter_config
from tests import hermetic
from tests.paths import REPO

SECRET = "sk-poisoned-0123456789abcdef"
POISON = f"""\
[server]
database = "poisoned.db"

[providers.poison]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"
api_key = "{SECRET}"

[models.poisoned]
provider = "poison"
model = "poisoned"
"""
# The tests that find, parse and report a configuration, and the CLI that loads one.
CONFIG_TESTS = sorted(str(p) for p in (REPO / "tests" / "app").glob("test_config*.py"))
CONFIG_TESTS.append(str(REPO / "tests" / "app" / "test_cli.py"))


def poisoned(root: Path) -> tuple[Path, dict[str, str]]:
    """A working directory, a home and an XDG_CONFIG_HOME each holding a configuration, and an
    environment naming another one, with provider keys and a proxy nobody listens on."""
    work, home, xdg = root / "work", root / "home", root / "xdg"
    for config in (
        work / LOCAL_CONFIG,
        home / ".config" / "cursor-byok" / "config.toml",
        xdg / "cursor-byok" / "config.toml",
        root / "named.toml",
    ):
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(POISON)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(xdg),
        "CURSOR_BYOK_CONFIG": str(root / "named.toml"),
        "OPENAI_API_KEY": SECRET,
        "ANTHROPIC_API_KEY": SECRET,
        "GEMINI_API_KEY": SECRET,
        "CLI_TEST_OPENAI_API_KEY": SECRET,
        "CURSOR_ACCESS_TOKEN": SECRET,
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "http_proxy": "http://127.0.0.1:9",
    }
    return work, env


def pytest_in(work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(REPO)]
    cmd += ["--basetemp", str(work.parent / "basetemp"), *args]
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)


def test_the_config_tests_pass_in_a_poisoned_directory_home_and_environment(
    tmp_path: Path,
) -> None:
    work, env = poisoned(tmp_path)
    result = pytest_in(work, env, *CONFIG_TESTS)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
    assert SECRET not in result.stdout + result.stderr


def test_without_the_fixture_the_poison_bites(tmp_path: Path) -> None:
    """The control: the same poison fails the test that once failed after scripts/serve."""
    work, env = poisoned(tmp_path)
    env.pop("CURSOR_BYOK_CONFIG")
    one = f"{REPO}/tests/app/test_config.py::test_load_config_errors"
    result = pytest_in(work, env, "--noconftest", one)
    assert result.returncode == 1, result.stdout[-4000:]
    assert "DID NOT RAISE" in result.stdout


def test_each_test_has_its_own_directory_home_and_environment(hermetic_test: Path) -> None:
    cwd = Path.cwd()
    assert cwd == hermetic_test and list(cwd.iterdir()) == []
    assert REPO not in (cwd, *cwd.parents)
    home = Path(os.environ["HOME"])
    assert home != cwd and list(home.iterdir()) == []
    assert Path.home() == home and Path("~").expanduser() == home
    assert os.environ["XDG_CONFIG_HOME"] == str(home / ".config")
    assert [name for name in os.environ if hermetic.cleared(name)] == []
    # The real parts are still found where scripts/llama_server.sh and setup.sh put them.
    assert os.environ[hermetic.CACHE_ENV] == str(hermetic.REAL_CACHE)
    assert os.environ[hermetic.REALCLIENT_ENV] == str(hermetic.REAL_REALCLIENT)
    assert home not in hermetic.REAL_CACHE.parents


@pytest.mark.parametrize(
    "name",
    [
        "CURSOR_BYOK_CONFIG",
        "CURSOR_BYOK_ANYTHING",
        "CURSOR_ACCESS_TOKEN",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "MY_LOCAL_LLM_API_KEY",
        "HTTPS_PROXY",
        "no_proxy",
    ],
)
def test_what_is_cleared(name: str) -> None:
    assert hermetic.cleared(name)


@pytest.mark.parametrize("name", [*sorted(hermetic.HARNESS_ENV), "PATH", "LANG", "CI"])
def test_what_is_kept(name: str) -> None:
    assert not hermetic.cleared(name)


def test_the_harness_knobs_are_never_read_by_the_server() -> None:
    """A test may see them only because the server does not read them."""
    sources = "\n".join(
        p.read_text() for p in (REPO / "src" / "cursor_byok").rglob("*.py") if "_pb2" not in p.name
    )
    assert [name for name in sorted(hermetic.HARNESS_ENV) if name in sources] == []


def test_what_scripts_serve_writes_is_ignored_by_git() -> None:
    """scripts/serve writes ./cursor-byok.toml (init) and serves its database, with SQLite's
    -wal and -shm beside it: none of them may show up as a change to commit."""
    database = parse_config(starter_config(), env={}).server.database
    written = [LOCAL_CONFIG, database, f"{database}-wal", f"{database}-shm"]
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "--verbose", *written],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    ignored = {line.split("\t", 1)[1] for line in result.stdout.splitlines()}
    assert sorted(set(written) - ignored) == []
