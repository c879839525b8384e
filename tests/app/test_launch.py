"""Serving entry points: the server in a child process, TLS with ALPN h2, bind safety."""

from __future__ import annotations

import _thread
import asyncio
import errno
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from cursor_byok.config import ConfigError, parse_config
from cursor_byok.launch import (
    ListenError,
    bind_address,
    check_bind,
    listen_error,
    main,
    native_threads_not_started_by_python,
    probe_health_blocking,
    running_server,
    serve,
    server_process,
    url_of,
    wait_for_native_threads,
)
from cursor_byok.transport.connect.sessions import TransportLimits
from cursor_byok.transport.cursor.proto import agent_pb2
from tests.support import connect_client as cc
from tests.support.live import free_port

REPO = Path(__file__).resolve().parents[2]
MODELS = """
[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[models.alpha]
provider = "local"
"""


def write_config(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f"[server]\n{server}\n{MODELS}")
    return path


def echo_turn(host: str, port: int, text: str) -> cc.StreamResult:
    """One HTTP/2 Run against the echo handler, from a fresh event loop."""

    async def turn() -> cc.StreamResult:
        client = await cc.H2Client.connect(host, port)
        try:
            stream = await client.open_run()
            await stream.send(cc.run_request(text))
            return await stream.read_all()
        finally:
            await client.close()

    return asyncio.run(turn())


def test_server_in_child_process(tmp_path: Path) -> None:
    config = write_config(tmp_path, 'host = "127.0.0.1"')
    env = {"PYTHONPATH": str(REPO)}
    with server_process(
        config, handler="tests.support.connect_client:echo_handler", heartbeat=0.2, env=env
    ) as srv:
        print(f"child-process server healthy after {srv.startup_s:.3f} s")
        resp = httpx.post(
            f"{srv.base_url}/agent.v1.AgentService/GetUsableModels",
            content=b"",
            headers={"content-type": "application/proto"},
        )
        assert agent_pb2.GetUsableModelsResponse.FromString(resp.content).models[0].model_id == (
            "alpha"
        )
        result = echo_turn(srv.host, srv.port, "child")
        assert result.texts == ["echo[run]: ", "child"] and result.end == {}
    assert not probe_health_blocking(srv.host, srv.port)  # stopped by SIGTERM
    assert srv.process is not None and srv.process.returncode == 0  # ... cleanly


def one_run_then_sigterm(config: Path) -> int | None:
    env = {"PYTHONPATH": str(REPO)}
    handler = "tests.support.connect_client:echo_handler"
    with server_process(config, handler=handler, env=env) as srv:
        assert echo_turn(srv.host, srv.port, "bye").end == {}
    assert srv.process is not None
    return srv.process.returncode


def test_sigterm_right_after_runs_exits_cleanly(tmp_path: Path) -> None:
    """granian's runtime threads outlive its future by a few milliseconds; a process that
    finalized Python before they exited died of SIGABRT on about one SIGTERM in ten under load
    (a Rust panic). Several servers at once make that load."""
    config = write_config(tmp_path, 'host = "127.0.0.1"')
    with ThreadPoolExecutor(6) as pool:
        codes = list(pool.map(one_run_then_sigterm, [config] * 12))
    assert codes == [0] * 12


def test_wait_for_native_threads() -> None:
    """The wait covers threads Python did not start (as granian's are) and gives up in time."""
    before = native_threads_not_started_by_python()
    release = threading.Event()
    _thread.start_new_thread(release.wait, (5.0,))  # not registered with `threading`
    deadline = time.monotonic() + 5
    while not native_threads_not_started_by_python() - before and time.monotonic() < deadline:
        time.sleep(0.001)
    assert native_threads_not_started_by_python() - before  # seen as foreign
    assert asyncio.run(wait_for_native_threads(before, timeout=0.05)) is False
    threading.Timer(0.1, release.set).start()
    t0 = time.monotonic()
    assert asyncio.run(wait_for_native_threads(before, timeout=5.0)) is True
    assert time.monotonic() - t0 >= 0.05  # it did wait for the thread to go
    assert not native_threads_not_started_by_python() - before


def test_a_foreign_thread_known_to_threading_is_still_waited_for() -> None:
    """A thread Python did not start becomes a dummy `threading` thread once code on it asks
    for `threading.current_thread()` (granian's threads run our code): still foreign."""
    before = native_threads_not_started_by_python()
    release = threading.Event()
    asked = threading.Event()

    def foreign() -> None:
        threading.current_thread()  # registers a _DummyThread for this native thread
        asked.set()
        release.wait(5.0)

    _thread.start_new_thread(foreign, ())
    assert asked.wait(5.0)
    assert any(isinstance(t, threading._DummyThread) for t in threading.enumerate())  # type: ignore[attr-defined]
    assert native_threads_not_started_by_python() - before
    assert asyncio.run(wait_for_native_threads(before, timeout=0.05)) is False
    release.set()
    assert asyncio.run(wait_for_native_threads(before, timeout=5.0)) is True


def test_entry_refuses_non_loopback_without_token(tmp_path: Path) -> None:
    config = parse_config(f'[server]\nhost = "127.0.0.1"\n{MODELS}')
    with pytest.raises(ConfigError, match="auth_token"):
        check_bind(config, "0.0.0.0")
    with pytest.raises(ConfigError, match="auth_token"):
        serve(config, cc.echo_handler, host="0.0.0.0")  # refuses before binding
    path = write_config(tmp_path, 'host = "127.0.0.1"')
    handler = "tests.support.connect_client:echo_handler"
    assert main(["--config", str(path), "--handler", handler, "--host", "0.0.0.0"]) == 2
    # a configuration file that binds a public address without a token never starts
    public = write_config(tmp_path, 'host = "0.0.0.0"')
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cursor_byok.launch",
            "--config",
            str(public),
            "--handler",
            handler,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert proc.returncode == 2 and "auth_token" in proc.stderr
    # with a token it is allowed
    check_bind(parse_config(f'[server]\nhost = "0.0.0.0"\nauth_token = "t"\n{MODELS}'), "0.0.0.0")


@pytest.mark.parametrize("entry", ["cursor-byok serve", "transport server"])
def test_a_port_in_use_is_one_clear_line(tmp_path: Path, entry: str) -> None:
    """granian reports it as a RuntimeError carrying a Rust backtrace when RUST_BACKTRACE is
    set; the user gets one line naming the address and what to do, and exit status 2."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path, f'host = "127.0.0.1"\nport = {port}')
        if entry == "cursor-byok serve":
            cmd = [sys.executable, "-m", "cursor_byok", "serve", "--config", str(config)]
            cmd += ["--db", str(tmp_path / "db")]
        else:
            cmd = [sys.executable, "-m", "cursor_byok.launch", "--config", str(config)]
            cmd += ["--handler", "tests.support.connect_client:echo_handler"]
        env = {**os.environ, "RUST_BACKTRACE": "1", "PYTHONPATH": str(REPO)}
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "choose another port" in done.stderr
    for noise in ("Traceback", "panicked", "os error", "serving"):
        assert noise not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_listen_errors_name_the_cause() -> None:
    in_use = listen_error(RuntimeError("Address already in use (os error 98)\n  0: ..."), "h", 1)
    assert in_use is not None and str(in_use).startswith("cannot listen on h:1: Address already")
    no_such = listen_error(OSError(errno.EADDRNOTAVAIL, "x"), "10.9.9.9", 8700)
    assert no_such is not None and "server.host" in str(no_such)
    denied = listen_error(RuntimeError("Permission denied (os error 13)"), "0.0.0.0", 80)
    assert denied is not None and "1024" in str(denied)
    assert listen_error(RuntimeError("something else broke"), "h", 1) is None
    assert listen_error(ValueError("(os error 98)"), "h", 1) is None


def test_bind_address_and_urls() -> None:
    assert bind_address("localhost", 8700) == "127.0.0.1"
    assert bind_address("127.0.0.1", 8700) == "127.0.0.1"
    assert bind_address("[::1]", 8700) == bind_address("::1", 8700) == "::1"
    assert bind_address("0.0.0.0", 8700) == "0.0.0.0"
    with pytest.raises(ListenError, match=r"cannot listen on no such host\.invalid:8700: not an"):
        bind_address("no such host.invalid", 8700)
    assert url_of("http", "::1", 8700) == url_of("http", "[::1]", 8700) == "http://[::1]:8700"
    assert url_of("https", "localhost", 1) == "https://localhost:1"


async def test_a_server_on_localhost(tmp_path: Path) -> None:
    """granian binds IP literals only; "localhost" used to stop start-up with a traceback."""
    config = parse_config(f'[server]\nhost = "localhost"\n{MODELS}')
    async with running_server(config, cc.echo_handler) as srv:
        assert srv.base_url == f"http://localhost:{srv.port}"
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{srv.port}/healthz")
        assert response.status_code == 200


def test_an_unknown_host_is_one_clear_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, 'host = "no such host.invalid"\nauth_token = "t0ken-for-test"')
    done = subprocess.run(
        [sys.executable, "-m", "cursor_byok", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "cannot listen on no such host.invalid:8700: not an address of this machine" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr and "t0ken-for-test" not in done.stderr


def make_ca_and_leaf(tmp: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a leaf for 127.0.0.1 (a self-signed leaf used as its own CA is
    rejected by rustls-based clients, so tests use a real chain)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl CLI not available")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=tmp)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=cursor-byok test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    run("req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=127.0.0.1")
    (tmp / "leaf.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "leaf.pem", "-days", "1", "-extfile", "leaf.ext")  # fmt: skip
    return tmp / "ca.pem", tmp / "leaf.pem", tmp / "leaf.key"


async def test_tls_with_alpn_h2(tmp_path: Path) -> None:
    ca, cert, key = make_ca_and_leaf(tmp_path)
    config = parse_config(
        f'[server]\nhost = "127.0.0.1"\ncertificate = "{cert}"\nprivate_key = "{key}"\n{MODELS}'
    )
    limits = TransportLimits(heartbeat_interval=0.2)
    async with running_server(config, cc.echo_handler, limits=limits) as srv:
        assert srv.base_url.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(ca))
        client = await cc.H2Client.connect(srv.host, srv.port, ssl_context=ctx)
        try:
            assert client.alpn == "h2"
            stream = await client.open_run()
            await stream.send(cc.run_request("over tls"))
            result = await stream.read_all()
            assert result.texts == ["echo[run]: ", "over tls"] and result.end == {}
        finally:
            await client.close()
        async with httpx.AsyncClient(base_url=srv.base_url, verify=ctx) as h1:
            assert (await h1.get("/healthz")).http_version == "HTTP/1.1"
            resp = await cc.unary(
                h1,
                "/agent.v1.AgentService/GetUsableModels",
                agent_pb2.GetUsableModelsRequest(),
                agent_pb2.GetUsableModelsResponse,
            )
            assert resp.models[0].model_id == "alpha"
        # a client that does not trust the CA is refused
        with pytest.raises(ssl.SSLError):
            await cc.H2Client.connect(srv.host, srv.port, ssl_context=ssl.create_default_context())


async def test_in_process_startup_time() -> None:
    config = parse_config(f'[server]\nhost = "127.0.0.1"\n{MODELS}')
    times = []
    for _ in range(3):
        t0 = time.monotonic()
        async with running_server(config, cc.echo_handler) as srv:
            times.append(time.monotonic() - t0)
            assert srv.startup_s > 0
    print(f"in-process server healthy after {sorted(times)[1]:.3f} s (median of 3)")
    assert sorted(times)[1] < 2.0


@pytest.mark.realclient
async def test_realclient_turn_against_echo_handler(realclient: Path) -> None:
    """oh-my-pi's Cursor provider (a client we did not write) completes a turn over h2c."""
    REALCLIENT = realclient
    bun = REALCLIENT / "node_modules" / ".bin" / "bun"

    config = parse_config(f'[server]\nhost = "127.0.0.1"\n{MODELS}')
    async with running_server(config, cc.echo_handler) as srv:
        proc = await asyncio.create_subprocess_exec(
            str(bun), "drive.ts", "--base", srv.base_url, "--prompt", "hi from omp", "--quiet",
            cwd=REALCLIENT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    text = out.decode()
    assert proc.returncode == 0, text
    assert text.rstrip().endswith("DRIVE OK")
    assert "hi from omp" in text


def test_a_second_server_on_the_same_port_refuses_to_start(tmp_path: Path) -> None:
    """granian listens with SO_REUSEPORT: without the check a second `serve` on the port of a
    running one started too, and the kernel split the connections between the two."""
    port = free_port()
    first_dir, second_dir = tmp_path / "one", tmp_path / "two"
    first_dir.mkdir()
    second_dir.mkdir()
    first_config = write_config(first_dir, f'host = "127.0.0.1"\nport = {port}')
    second_config = write_config(second_dir, f'host = "127.0.0.1"\nport = {port}')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "cursor_byok", "serve"]
    first = subprocess.Popen(
        [*cmd, "--config", str(first_config), "--db", str(first_dir / "db")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not probe_health_blocking("127.0.0.1", port):
            assert first.poll() is None and time.monotonic() < deadline, "the first did not start"
            time.sleep(0.05)
        second = subprocess.run(
            [*cmd, "--config", str(second_config), "--db", str(second_dir / "db")],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert second.returncode == 2, second.stderr
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert first.poll() is None  # the first one keeps serving
    finally:
        first.terminate()
        first.wait(30)
