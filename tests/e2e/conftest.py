"""End-to-end fixtures: our server process, a scripted upstream, the real third-party client."""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live import ServerProcess, ThreadedUpstream, brain_config, server_process
from tests.support.postgres import Cluster
from tests.support.upstream import FakeUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with ThreadedUpstream() as up:
        yield up


_DATABASES = itertools.count(1)


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One database for several server processes: a SQLite file, or a new database on the
    suite's PostgreSQL cluster."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    return cluster.create_database(f"shared{next(_DATABASES)}")


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("server")
    with server_process(brain_config(upstream.base_url, db=work / "byok.db"), work) as srv:
        yield srv


def bun(folder: Path) -> str:
    path = folder / "node_modules" / ".bin" / "bun"
    return str(path) if path.exists() else "bun"


def drive(
    folder: Path, base: str, *args: str, cwd: Path | None = None, timeout: int = 60
) -> subprocess.CompletedProcess[str]:
    cmd = [bun(folder), str(folder / "drive.ts"), "--base", base, "--quiet", *args]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or folder,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
