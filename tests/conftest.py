"""Suite-wide settings."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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
