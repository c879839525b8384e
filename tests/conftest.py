"""Suite-wide settings."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests import hermetic
from tests.paths import REALCLIENT
from tests.support import postgres
from tests.support.postgres import Cluster

SETUP = REALCLIENT / "setup.sh"
REAL_MODEL_PREFIX = "tests/realupstream/"
REAL_MODEL_GROUP = "llama-server"
# The misjudged-window test reads the most prompt tokens of all (about 7 minutes beside another
# worker); as a unit of its own it runs on another worker, with its own 8k llama-server, while
# the other real-model tests run on the first.
WINDOW_MODULE = "tests/realupstream/test_windows_real.py"
WINDOW_GROUP = "llama-server-windows"

# Correctness, not speed, is what the property tests check: timing limits only make them flaky
# on a loaded 2-core machine. Speed targets live in bench/.
settings.register_profile(
    "cursor-byok", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("cursor-byok")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real-model tests first: under `pytest -n N` (scripts/test) they are the two longest
    work units (`pytest_xdist_make_scheduler`), so two workers start on them while the others
    share the rest."""
    items.sort(key=lambda item: not _is_real_model(item.nodeid))


def _is_real_model(nodeid: str) -> bool:
    return nodeid.startswith(REAL_MODEL_PREFIX)


def _work_unit(nodeid: str) -> str:
    """One unit per module, because a module's tests share module-scoped servers and some
    read what earlier ones did. The real-model tests are two units: the window test's module,
    and every other one, so each worker's llama-servers start once and two of them read
    prompts at once at most (one core each on two cores, with `-tb 1`)."""
    if nodeid.startswith(WINDOW_MODULE):
        return WINDOW_GROUP
    return REAL_MODEL_GROUP if _is_real_model(nodeid) else nodeid.split("::", 1)[0]


if importlib.util.find_spec("xdist") is not None:
    from xdist.scheduler import LoadScopeScheduling

    class _WorkUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    @pytest.hookimpl(optionalhook=True)  # `-p no:xdist` leaves the hook undefined
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling:
        """xdist's own `loadgroup` marks no longer reach its scheduler under pytest 9.2 (it
        renames `item._nodeid`, which pytest stopped reading), so the units are named here."""
        return _WorkUnits(config, log)


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
