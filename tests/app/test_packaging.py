"""The built distribution works on its own, as a user's `pip install cursor-byok` would.

`python -m build` makes the sdist and, from the sdist, the wheel, out of a copy of the files a
commit would hold. The wheel goes into a fresh venv (not .venv, and without this checkout's
src/ on the path), and its console script runs `--version`, `init`, `doctor` and `serve`.
What the wheel needs beside its .py files is proven by use: doctor migrates a database (the
.sql migrations), serve answers /dashboard (the page) and a Connect call (the generated
protobuf modules).

The build requirements and the dependencies come from a wheelhouse cached per machine
(`$CURSOR_BYOK_CACHE/wheelhouse`, default `~/.cache/cursor-byok/wheelhouse`), filled from the
package index the first time or when a requirement changes. A cached run uses no index at all.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cursor_byok.launch import free_port, probe_health_blocking
from cursor_byok.store.migrate import latest_version
from cursor_byok.transport.cursor.proto import agent_pb2
from tests.paths import REPO
from tests.support.connect_client import unary

pytestmark = pytest.mark.packaging

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PROJECT["project"]["version"]
STARTER_URL = "http://127.0.0.1:8080/v1"  # the local provider in `cursor-byok init`'s file
STEP_TIMEOUT_S = 600


def _wheelhouse() -> Path:
    cache = os.environ.get("CURSOR_BYOK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cursor-byok"
    )
    return Path(cache) / "wheelhouse"


def _env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing that points Python at this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.pop("CURSOR_BYOK_CONFIG", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return {**env, **extra}


def _offline_env(wheelhouse: Path) -> dict[str, str]:
    """pip with no index and no configuration file: only the wheelhouse."""
    return _env(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse), PIP_CONFIG_FILE=os.devnull)


def _run(cmd: list[str], *, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=STEP_TIMEOUT_S
    )


def _check(result: subprocess.CompletedProcess[str], what: str) -> None:
    if result.returncode != 0:
        pytest.fail(f"{what} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")


def _fill_wheelhouse(wheelhouse: Path, requirements: list[str], cwd: Path) -> None:
    """Make the wheelhouse hold every requirement; ask the index only for what it lacks."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    download = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(wheelhouse)]
    if _run([*download, *requirements], env=_offline_env(wheelhouse), cwd=cwd).returncode == 0:
        return
    _check(_run([*download, *requirements], env=_env(), cwd=cwd), "pip download (wheelhouse)")


def _copy_source(dest: Path) -> None:
    """The files a commit would hold: tracked ones and new ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the work tree is listed too
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


@dataclass(frozen=True)
class Built:
    source: Path
    wheel: Path
    sdist: Path
    venv: Path
    seconds: dict[str, float]

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("packaging")
    source, dist, venv = root / "source", root / "dist", root / "venv"
    wheelhouse = _wheelhouse()
    requirements = [*PROJECT["build-system"]["requires"], *PROJECT["project"]["dependencies"]]
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    _copy_source(source)
    _fill_wheelhouse(wheelhouse, requirements, root)
    seconds["wheelhouse"] = time.monotonic() - t0

    t0 = time.monotonic()
    build = [sys.executable, "-m", "build", "--outdir", str(dist), str(source)]
    _check(_run(build, env=_offline_env(wheelhouse), cwd=root), "python -m build")
    seconds["build"] = time.monotonic() - t0
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")

    t0 = time.monotonic()
    _check(
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=_env(), cwd=root),
        "python -m venv",
    )
    install = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    install += ["install", "-q", "--no-compile", str(wheel)]
    _check(_run(install, env=_offline_env(wheelhouse), cwd=root), "pip install (the wheel)")
    seconds["venv+install"] = time.monotonic() - t0
    print("packaging:", ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))  # with -s
    return Built(source, wheel, sdist, venv, seconds)


def test_the_wheel_holds_every_package_file_the_licence_and_the_metadata(built: Built) -> None:
    package = built.source / "src"
    expected = {
        p.relative_to(package).as_posix()
        for p in (package / "cursor_byok").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    # What only running reveals missing: the page, the migrations, the typing marker and
    # the generated protobuf modules. Named here so a pattern that stops matching fails.
    assert {
        "cursor_byok/py.typed",
        "cursor_byok/observability/dashboard.html",
        "cursor_byok/store/migrations/0001_initial.sql",
        "cursor_byok/transport/cursor/proto/agent_pb2.py",
        "cursor_byok/transport/cursor/proto/aiserver_pb2.py",
    } <= expected
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        info = f"cursor_byok-{VERSION}.dist-info"
        metadata = wheel.read(f"{info}/METADATA").decode()
        licence = wheel.read(f"{info}/licenses/LICENSE").decode()
    assert sorted(expected - names) == []
    assert licence == (REPO / "LICENSE").read_text()
    assert licence.startswith("MIT License\n")
    headers = metadata.split("\n\n", 1)[0]
    assert "License-Expression: MIT" in headers.splitlines()
    assert "Classifier: Typing :: Typed" in headers.splitlines()
    assert re.search(r"^Project-URL: Homepage, https://", headers, re.M)
    with tarfile.open(built.sdist) as sdist:
        assert f"cursor_byok-{VERSION}/LICENSE" in sdist.getnames()


@contextlib.contextmanager
def refused_port(preferred: int) -> Iterator[int]:
    """A loopback port held bound but not listening: connecting to it is refused, and no other
    process can start listening on it while the test runs. The preferred one if it is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
        except OSError:  # something holds it (a llama-server on 8080): use another
            sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def test_the_installed_wheel_runs_version_init_and_doctor(built: Built, tmp_path: Path) -> None:
    where = _run(
        [built.bin("python"), "-c", "import cursor_byok; print(cursor_byok.__file__)"],
        env=_env(),
        cwd=tmp_path,
    )
    _check(where, "import cursor_byok")
    assert where.stdout.strip().startswith(str(built.venv)), where.stdout

    version = _run([built.bin("cursor-byok"), "--version"], env=_env(), cwd=tmp_path)
    _check(version, "cursor-byok --version")
    assert version.stdout.strip() == f"cursor-byok {VERSION}"

    config = tmp_path / "starter.toml"
    _check(
        _run([built.bin("cursor-byok"), "init", str(config)], env=_env(), cwd=tmp_path),
        "cursor-byok init",
    )
    assert f'base_url = "{STARTER_URL}"' in config.read_text()

    db = tmp_path / "doctor.sqlite"
    db.touch()  # an empty file: doctor opens it as serve would, running every migration
    with refused_port(8080) as port:
        url = STARTER_URL.replace(":8080", f":{port}")
        config.write_text(config.read_text().replace(STARTER_URL, url))
        doctor = [built.bin("cursor-byok"), "doctor", "--config", str(config), "--db", str(db)]
        result = _run([*doctor, "--timeout", "20"], env=_env(), cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr  # docs/operations.md: 1 if a check failed
    rows = re.sub(r"\n {8,}", " ", out)  # a row's detail wraps under DETAIL (100 columns)
    assert re.search(r"^config\s+OK\b", rows, re.M), out
    latest = latest_version()
    assert re.search(rf"^database\s+OK\b.*schema v{latest} \(latest {latest}\)", rows, re.M), out
    failed = re.findall(r"^(\S+(?: \S+)*) {2,}FAIL\b", rows, re.M)
    assert failed == ["provider local"], out  # the unreachable local server, nothing else
    assert f"127.0.0.1:{port}" in out, out


async def test_the_installed_wheel_serves_the_dashboard_and_the_models(
    built: Built, tmp_path: Path
) -> None:
    config = tmp_path / "starter.toml"
    _check(
        _run([built.bin("cursor-byok"), "init", str(config)], env=_env(), cwd=tmp_path),
        "cursor-byok init",
    )
    port = free_port()
    serve = [built.bin("cursor-byok"), "serve", "--config", str(config), "--port", str(port)]
    serve += ["--db", str(tmp_path / "serve.sqlite")]
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(serve, env=_env(), cwd=tmp_path, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while not probe_health_blocking("127.0.0.1", port):
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            page = await client.get("/dashboard")
            models = await unary(
                client,
                "/agent.v1.AgentService/GetUsableModels",
                agent_pb2.GetUsableModelsRequest(),
                agent_pb2.GetUsableModelsResponse,
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "cursor-byok" in page.text
    assert [m.model_id for m in models.models] == ["local"]


def test_without_the_postgres_extra_a_postgresql_database_fails_in_one_line(
    built: Built, tmp_path: Path
) -> None:
    """psycopg is the `postgres` extra, not a core dependency: the wheel alone has none, runs
    on SQLite (the tests above), and `serve`, `doctor` and `token` given a postgresql://
    database each fail with one line naming the extra, no traceback, no password."""
    probe = _run([built.bin("python"), "-c", "import psycopg"], env=_env(), cwd=tmp_path)
    assert probe.returncode == 1 and "No module named 'psycopg'" in probe.stderr
    config = tmp_path / "starter.toml"
    _check(
        _run([built.bin("cursor-byok"), "init", str(config)], env=_env(), cwd=tmp_path),
        "cursor-byok init",
    )
    url = "postgresql://someone:pg-secret-pw@127.0.0.1:1/cursor"
    extra = "pip install 'cursor-byok[postgres]'"
    commands = {
        "serve": ["serve", "--port", str(free_port())],
        "doctor": ["doctor", "--timeout", "1"],
        "token": ["token", "list"],
    }
    for name, args in commands.items():
        cmd = [built.bin("cursor-byok"), *args, "--config", str(config), "--db", url]
        result = _run(cmd, env=_env(), cwd=tmp_path)
        said = result.stdout + result.stderr
        assert result.returncode in (1, 2), f"{name}: {said}"
        assert "Traceback" not in said and "pg-secret-pw" not in said, f"{name}: {said}"
        text = re.sub(r"\n {8,}", " ", said)  # doctor's table wraps a row's detail
        lines = [line for line in text.splitlines() if "postgres extra" in line]
        assert len(lines) == 1, f"{name}: {said}"
        assert extra in lines[0] and "postgresql://someone@127.0.0.1:1/cursor" in lines[0]
        if name == "doctor":
            assert re.match(r"database\s+FAIL\s", lines[0]), said
