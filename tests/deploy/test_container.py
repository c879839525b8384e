"""The Dockerfile's image, built and run for real with podman (scripts/container_image.sh).

The base image is a Debian root made by mmdebstrap (no image can be pulled here). One
container serves with the configuration and the database as volumes: it runs as uid 10001,
/healthz answers and the image's HEALTHCHECK passes, the token is required, a run is stored,
an online backup of the live database is whole; then the container is removed and a new one
on the same volume still has that run.

Opt-in (about 25 s with the base, the wheels and the layers cached; 1 minute after a change
to src/; about 4 the first time on a machine):
CURSOR_BYOK_CONTAINER_TESTS=1 python -m pytest tests/deploy -m container. Without it, or
without podman, runc and mmdebstrap, every test here is skipped, with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cursor_byok.launch import free_port
from tests.paths import REPO
from tests.support import connect_client as cc

pytestmark = pytest.mark.container

OPT_IN = "CURSOR_BYOK_CONTAINER_TESTS"
TOOLS = ("podman", "runc", "mmdebstrap")
TAG = "localhost/cursor-byok:test"
TOKEN = "container-test-token-" + uuid.uuid4().hex[:8]
DATA = "/var/lib/cursor-byok"
CONFIG = f"""\
[server]
host = "0.0.0.0"
database = "{DATA}/cursor-byok.db"
auth_token = "{TOKEN}"

[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[models.local]
provider = "local"
model = "local-model"
"""


def _podman_env() -> dict[str, str]:
    conf = str(REPO / "scripts" / "podman-containers.conf")
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", conf)}


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["podman", *args], env=_podman_env(), capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        pytest.fail(f"podman {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return result


@pytest.fixture(scope="module")
def image() -> str:
    if os.environ.get(OPT_IN) != "1":
        pytest.skip(f"opt-in: set {OPT_IN}=1 (builds and runs the image: 25 s to 4 minutes)")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (apt-get install podman runc mmdebstrap)")
    started = time.monotonic()
    result = subprocess.run(
        [str(REPO / "scripts" / "container_image.sh"), TAG],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if result.returncode == 77:
        pytest.skip(result.stderr.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip() == TAG
    print(f"image built in {time.monotonic() - started:.0f} s")
    return TAG


@contextlib.contextmanager
def server(image: str, volume: str, config_dir: Path) -> Iterator[tuple[str, int]]:
    """One container serving `config_dir` (read-only) and `volume`, on a loopback port."""
    port = free_port()
    name = f"cursor-byok-test-{uuid.uuid4().hex[:8]}"
    podman(
        "run", "-d", "--name", name,
        "-v", f"{volume}:{DATA}",
        "-v", f"{config_dir}:/etc/cursor-byok:ro",
        "-p", f"127.0.0.1:{port}:8700",
        image,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail("no /healthz in 60 s: " + podman("logs", name, check=False).stderr)
            time.sleep(0.2)
        yield name, port
    finally:
        stopped = podman("stop", "--time", "20", name, check=False)
        logs = podman("logs", name, check=False)
        podman("rm", "-f", name, check=False)
        assert stopped.returncode == 0, stopped.stderr
        assert TOKEN not in logs.stdout + logs.stderr


@pytest.fixture
def volume() -> Iterator[str]:
    name = f"cursor-byok-test-data-{uuid.uuid4().hex[:8]}"
    podman("volume", "create", name)
    try:
        yield name
    finally:
        podman("volume", "rm", "-f", name, check=False)


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "config"
    folder.mkdir()
    (folder / "config.toml").write_text(CONFIG)
    # The server runs as uid 10001: it reads the file, never writes it.
    folder.chmod(0o755)
    (folder / "config.toml").chmod(0o644)
    return folder


def summary(port: int) -> dict[str, Any]:
    reply = httpx.get(
        f"http://127.0.0.1:{port}/dashboard/api/summary",
        headers=cc.auth_headers(TOKEN),
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    data: dict[str, Any] = reply.json()
    return data


async def one_run(port: int, request_id: str) -> cc.StreamResult:
    client = await cc.H2Client.connect("127.0.0.1", port)
    try:
        stream = await client.open_run(token=TOKEN, request_id=request_id)
        await stream.send(cc.run_request("hello from the container test"))
        return await stream.read_all(timeout=120)
    finally:
        await client.close()


def test_image_metadata(image: str) -> None:
    found = json.loads(podman("image", "inspect", image).stdout)[0]
    inspected = found["Config"]
    assert inspected["User"] == "10001:10001"
    # podman keeps the HEALTHCHECK beside Config (in the docker-format image it builds).
    assert found["Healthcheck"]["Test"] == ["CMD", "python3", "/opt/cursor-byok/healthcheck.py"]
    assert set(inspected["Volumes"]) == {"/etc/cursor-byok", DATA}
    assert inspected["Entrypoint"] == ["cursor-byok"] and inspected["Cmd"] == ["serve"]
    # The wheel in a venv; no source tree, no wheels left behind.
    probe = "ls /opt/cursor-byok/bin/cursor-byok; ls -d /src /tmp/wheels 2>/dev/null; true"
    listing = podman("run", "--rm", "--no-healthcheck", "--entrypoint", "sh", image, "-c", probe)
    assert listing.stdout.split() == ["/opt/cursor-byok/bin/cursor-byok"]
    version = podman("run", "--rm", "--no-healthcheck", image, "--version").stdout
    assert version.startswith("cursor-byok ")
    # The image serves PostgreSQL too: the `postgres` extra (psycopg with its libpq) is in.
    driver = "import psycopg; print(psycopg.pq.version() > 0)"
    entry = ("run", "--rm", "--no-healthcheck", "--entrypoint", "/opt/cursor-byok/bin/python")
    assert podman(*entry, image, "-c", driver).stdout.split() == ["True"]


async def test_serves_as_non_root_and_keeps_the_database_in_its_volume(
    image: str, volume: str, config_dir: Path
) -> None:
    request_id = f"container-{uuid.uuid4().hex[:8]}"
    with server(image, volume, config_dir) as (name, port):
        status = podman("exec", name, "grep", "-E", "^(Uid|Gid):", "/proc/1/status").stdout
        assert status.split() == ["Uid:", *["10001"] * 4, "Gid:", *["10001"] * 4]
        health = podman("healthcheck", "run", name, check=False)
        assert health.returncode == 0, health.stdout + health.stderr
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/metrics", timeout=5).status_code == 401
        authed = httpx.get(f"{base}/metrics", headers=cc.auth_headers(TOKEN), timeout=5)
        assert authed.status_code == 200

        result = await one_run(port, request_id)
        assert result.status == 200
        # The provider is unreachable: the run fails, and its outcome is stored.
        runs = {r["request_id"]: r for r in summary(port)["runs"]}
        deadline = time.monotonic() + 20
        while request_id not in runs and time.monotonic() < deadline:
            time.sleep(0.2)
            runs = {r["request_id"]: r for r in summary(port)["runs"]}
        assert runs[request_id]["failed"] is True

        # docs/deploy.md's online backup of the live database (WAL included).
        backup = (
            "import sqlite3\n"
            f"src = sqlite3.connect('{DATA}/cursor-byok.db')\n"
            f"dst = sqlite3.connect('{DATA}/backup.db')\n"
            "src.backup(dst)\n"
            "print(dst.execute('PRAGMA integrity_check').fetchone()[0],\n"
            "      dst.execute('SELECT count(*) FROM run_outcomes').fetchone()[0])\n"
        )
        checked = podman("exec", name, "python3", "-c", backup).stdout.split()
        assert checked == ["ok", "1"]

    # A new container on the same volume: the run is still there.
    with server(image, volume, config_dir) as (name, port):
        runs = {r["request_id"]: r for r in summary(port)["runs"]}
        assert runs[request_id]["failed"] is True
        files = podman("exec", name, "ls", DATA).stdout.split()
        assert "cursor-byok.db" in files and "backup.db" in files
