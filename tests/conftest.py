"""Suite-wide settings."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests import hermetic
from tests.paths import REALCLIENT
from tests.support import postgres
from tests.support.postgres import Cluster

SETUP = REALCLIENT / "setup.sh"

# Correctness, not speed, is what the property tests check: timing limits only make them flaky
# on a loaded 2-core machine. Speed targets live in bench/.
settings.register_profile(
    "cursor-byok", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("cursor-byok")


@pytest.fixture(autouse=True)
def hermetic_test(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test runs in an empty working directory of its own, with a home of its own and
    without the user's CURSOR_* variables, provider keys or proxies (tests/hermetic.py): a
    ./cursor-byok.toml left by scripts/serve, a ~/.config/cursor-byok/config.toml or an
    exported OPENAI_API_KEY never changes a result. Returns the working directory."""
    root = tmp_path_factory.mktemp("hermetic")
    work, home = root / "work", root / "home"
    work.mkdir()
    home.mkdir()
    for name in [n for n in os.environ if hermetic.cleared(n)]:
        monkeypatch.delenv(name)
    for name, value in hermetic.isolated_environment(home).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(work)
    return work


@pytest.fixture(scope="session")
def realclient() -> Path:
    """The oh-my-pi client installed by tests/realclient/setup.sh (cached per machine)."""
    if not SETUP.is_file():
        pytest.fail(f"{SETUP} is missing from the repository")
    proc = subprocess.run(
        ["bash", str(SETUP)], capture_output=True, text=True, timeout=600, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"realclient setup failed:\n{proc.stderr[-3000:]}", pytrace=False)
    folder = Path(proc.stdout.strip().splitlines()[-1])
    assert (folder / "drive.ts").is_file(), folder
    return folder


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """One throwaway PostgreSQL cluster for the whole session (tests/support/postgres.py);
    each test that needs one makes its own database in it."""
    with postgres.cluster() as c:
        yield c
