"""Starting and stopping the server: granian on one port (HTTP/1.1 and h2c, or TLS with ALPN),
in our own asyncio loop, serving the Connect app built for the Cursor service.

Part of the composition root: it reads the configuration (addresses, TLS, the token) and wires
the transport's pieces; the transport itself knows none of it. Also the test helpers that start
a server in-process (`running_server`) or in a child process (`server_process`, which runs this
module as `python -m cursor_byok.launch --config FILE --handler module:attr`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import importlib
import ipaddress
import logging
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import Config, ConfigError, ServerConfig, is_loopback, load_config, port_number
from .transport.connect.app import (
    HEALTH_PATH,
    Authenticator,
    ConnectApp,
    ExtraRoutes,
    PlainRoutes,
)
from .transport.connect.clients import parse_networks
from .transport.connect.relay import AppendRelay
from .transport.connect.rsgi import RsgiBridge
from .transport.connect.sessions import RunHandler, TransportLimits
from .transport.cursor import CursorService, RpcSettings
from .transport.cursor.rpc_base import RpcBackend


def check_bind(config: Config, host: str) -> None:
    """Refuse to serve a non-loopback address without a token."""
    if not is_loopback(host) and not config.server.auth_token:
        raise ConfigError(
            f"server.auth_token is required when serving on {host!r} (not loopback); "
            "set a token or bind to 127.0.0.1"
        )


class ListenError(Exception):
    """The server could not listen on its address (port in use, no permission, bad address)."""


_OS_ERROR = re.compile(r"\(os error (\d+)\)")
_LISTEN_HINTS = {
    errno.EADDRINUSE: "another process is listening there; stop it, or choose another port "
    "(--port or server.port)",
    errno.EACCES: "ports below 1024 need privileges; choose a port from 1024 up",
    errno.EADDRNOTAVAIL: "the address is not one of this machine's (server.host)",
}


def listen_error(exc: BaseException, host: str, port: int) -> ListenError | None:
    """granian reports a socket it could not open as RuntimeError("... (os error N)"), with a
    Rust backtrace when RUST_BACKTRACE is set: turn that into one readable line."""
    found = _OS_ERROR.search(str(exc)) if isinstance(exc, RuntimeError | OSError) else None
    code = int(found.group(1)) if found else getattr(exc, "errno", None)
    if not isinstance(code, int):
        return None
    hint = _LISTEN_HINTS.get(code)
    reason = os.strerror(code) + (f": {hint}" if hint else "")
    return ListenError(f"cannot listen on {host}:{port}: {reason}")


def refuse_if_taken(host: str, port: int) -> None:
    """Raise ListenError when something already listens on host:port. granian opens its socket
    with SO_REUSEPORT, so a second server on a port that another cursor-byok holds would start
    as well and the kernel would split connections between two configurations and databases;
    a plain bind (without SO_REUSEPORT) finds any listener first. Port 0 picks a free port."""
    if port == 0:
        return
    address = bind_address(host, port)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not a holder
        try:
            probe.bind((address, port))
        except OSError as exc:
            raise listen_error(exc, host, port) or ListenError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None


def bind_address(host: str, port: int) -> str:
    """The IP address to listen on for `host`: granian takes IP literals only (a name such as
    "localhost" made it raise "invalid IP address syntax"). Names resolve like a listening
    socket's (IPv4 first); a name that does not resolve is a ListenError."""
    literal = host.strip("[]")
    try:
        return str(ipaddress.ip_address(literal))
    except ValueError:
        pass
    if host.lower() in ("localhost", "localhost.localdomain"):
        return "127.0.0.1"
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ListenError(
            f"cannot listen on {host}:{port}: not an address of this machine ({reason}); "
            "set server.host to an IP address such as 127.0.0.1"
        ) from None
    ipv4 = [info for info in found if info[0] == socket.AF_INET]
    return str((ipv4 or found)[0][4][0])


def url_of(scheme: str, host: str, port: int) -> str:
    """A URL for a host and port (IPv6 literals in brackets)."""
    bare = host.strip("[]")
    return f"{scheme}://[{bare}]:{port}" if ":" in bare else f"{scheme}://{host}:{port}"


def connect_app(
    config: Config,
    handler: RunHandler,
    *,
    limits: TransportLimits | None = None,
    routes: ExtraRoutes | None = None,
    authenticator: Authenticator | None = None,
    relay: AppendRelay | None = None,
    plain_routes: PlainRoutes | None = None,
    rpc_backend: RpcBackend | None = None,
    path_encryption_key: str | None = None,
) -> ConnectApp:
    """The Connect app serving the Cursor agent service with `handler` as its run handler;
    `relay`: replicas on one database deliver the shim's appends through it; `plain_routes`:
    the sign-in pages; `rpc_backend`: what the unary RPCs read from the store or a model."""
    server = config.server
    rpc = RpcSettings(
        models=tuple(config.models.values()),
        http2=server.http2,
        default_model=server.default_model,
        path_encryption_key=path_encryption_key,
        backend=rpc_backend,
    )
    service = CursorService(rpc)
    return ConnectApp(
        service,
        handler,
        auth_token=server.auth_token,
        runsse_content_type=server.runsse_content_type,
        limits=limits or transport_limits(server),
        routes=routes,
        authenticator=authenticator,
        relay=relay,
        plain_routes=plain_routes,
        trusted_proxies=parse_networks(server.trusted_proxies),
    )


def transport_limits(server: ServerConfig) -> TransportLimits:
    """The transport's limits as the configuration sets them (the rest at their defaults)."""
    mib = 1 << 20
    return TransportLimits(
        max_held_bytes=server.run_held_appends_mib * mib,
        max_output_bytes=server.run_output_mib * mib,
        max_buffered_bytes=server.runs_memory_mib * mib,
        unstarted_timeout=server.unstarted_run_timeout_s,
        orphan_timeout=server.reconnect_grace_s,
        max_unstarted_per_client=server.unstarted_runs_per_client,
        max_unstarted_bytes_per_client=server.unstarted_mib_per_client * mib,
    )


def _granian_server(
    app: ConnectApp,
    cfg: ServerConfig,
    host: str,
    port: int,
    *,
    quiet: bool,
    on_listening: Callable[[], None] | None = None,
) -> Any:
    from granian.constants import HTTPModes, Interfaces, SSLProtocols
    from granian.http import HTTP2Settings
    from granian.log import LogLevels
    from granian.server.embed import Server

    tls: dict[str, Any] = {}
    if cfg.certificate and cfg.private_key:
        tls = {
            "ssl_cert": Path(cfg.certificate),
            "ssl_key": Path(cfg.private_key),
            "ssl_protocol_min": SSLProtocols.tls12,
        }
    # RSGI, not ASGI: granian's ASGI send costs tens to hundreds of microseconds per chunk on
    # the loop's thread, its RSGI send about 2 µs (see rsgi.py).
    server = Server(
        # The body of an unauthenticated request is never read (not even its first chunk).
        RsgiBridge(app, on_start=_then(app.start, on_listening), may_read_body=app.authorized),
        address=bind_address(host, port),
        port=port,
        interface=Interfaces.RSGI,
        http=HTTPModes.auto,
        # granian's default of 200 streams per HTTP/2 connection refused the 201st run of a
        # connection; one connection of the IDE carries every run of a window.
        http2_settings=HTTP2Settings(max_concurrent_streams=cfg.http2_max_concurrent_streams),
        backlog=4096,
        log_enabled=not quiet,
        log_level=LogLevels.warning,
        **tls,
    )
    logging.getLogger("_granian").addFilter(_drop_embed_warning)
    return server


def native_threads_not_started_by_python() -> frozenset[int]:
    """Ids of this process's threads that Python did not start: granian's Rust runtime. Empty
    where /proc is missing (then there is nothing to wait for). A foreign thread that asked
    `threading` who it is shows up there as a dummy thread: it still counts as foreign."""
    try:
        tids = {int(tid) for tid in os.listdir("/proc/self/task")}
    except OSError:
        return frozenset()
    ours = {t.native_id for t in threading.enumerate() if not isinstance(t, threading._DummyThread)}
    return frozenset(tids - ours)


async def wait_for_native_threads(before: frozenset[int], timeout: float = 5.0) -> bool:
    """Wait until the threads granian started have exited; True when they have.

    Why: granian's future resolves while its runtime threads are still dropping the last
    connections' Python objects. A thread that asks for the GIL once the interpreter is
    finalizing is ended with a forced unwind, which aborts the process (SIGABRT, "panic in a
    function that cannot unwind") instead of a clean exit on SIGTERM."""
    deadline = time.monotonic() + timeout
    while native_threads_not_started_by_python() - before:
        if time.monotonic() > deadline:
            logging.getLogger(__name__).warning(
                "granian's threads had not exited %.1f s after the server stopped", timeout
            )
            return False
        await asyncio.sleep(0.005)
    return True


def _then(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    if then is None:
        return first

    def both() -> None:
        first()
        then()

    return both


def _drop_embed_warning(record: logging.LogRecord) -> bool:
    # granian's embedded mode warns that it is experimental on every start; we chose it knowingly
    # (docs/transport.md) and the warning would only alarm users.
    return "experimental" not in record.getMessage()


async def serve_async(
    config: Config,
    handler: RunHandler,
    *,
    limits: TransportLimits | None = None,
    host: str | None = None,
    port: int | None = None,
    stop: asyncio.Event | None = None,
    install_signals: bool = True,
    quiet: bool = False,
    routes: ExtraRoutes | None = None,
    authenticator: Authenticator | None = None,
    on_server_created: Callable[[], None] | None = None,
    on_listening: Callable[[], None] | None = None,
    relay: AppendRelay | None = None,
    plain_routes: PlainRoutes | None = None,
    rpc_backend: RpcBackend | None = None,
    path_encryption_key: str | None = None,
    check_port: bool = True,
) -> None:
    """Serve until SIGINT/SIGTERM (or until `stop` is set), in the running event loop.
    `on_listening` runs once the socket is open. Raises ListenError when it cannot be.
    `check_port=False`: a worker of several on one port, whose supervisor checked it."""
    host = host or config.server.host
    port = config.server.port if port is None else port
    check_bind(config, host)
    if check_port:
        refuse_if_taken(host, port)
    app = connect_app(
        config,
        handler,
        limits=limits,
        routes=routes,
        authenticator=authenticator,
        relay=relay,
        plain_routes=plain_routes,
        rpc_backend=rpc_backend,
        path_encryption_key=path_encryption_key,
    )
    if relay is not None and app.relayed is not None:
        await relay.watch_appends(app.relayed.heard, app.relayed.resync)
    threads_before = native_threads_not_started_by_python()
    server = _granian_server(app, config.server, host, port, quiet=quiet, on_listening=on_listening)
    if on_server_created is not None:
        on_server_created()  # e.g. re-install log redaction on handlers granian just added
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    if install_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    task = loop.create_task(server.serve())

    async def _stopper() -> None:
        await stop.wait()
        server.stop()
        # End the runs now, not once granian is done: a run's stream stays open until its
        # run ends, and granian waits for open streams (the model calls of a stopping
        # server end at once, recorded as a shutdown).
        await app.shutdown()

    stopper = loop.create_task(_stopper())
    try:
        try:
            await task
        except (RuntimeError, OSError) as exc:
            if app.ready or (error := listen_error(exc, host, port)) is None:
                raise
            raise error from None
    finally:
        stopper.cancel()
        await app.shutdown()
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        await wait_for_native_threads(threads_before)


def serve(
    config: Config,
    handler: RunHandler,
    *,
    limits: TransportLimits | None = None,
    host: str | None = None,
    port: int | None = None,
) -> int:
    """Blocking entry for app.py: serve until interrupted. Returns an exit status."""
    check_bind(config, host or config.server.host)
    scheme = "https" if config.server.certificate else "http"
    url = url_of(scheme, host or config.server.host, config.server.port if port is None else port)

    def listening() -> None:
        print(f"cursor-byok: serving on {url}", file=sys.stderr)

    try:
        asyncio.run(
            serve_async(
                config, handler, limits=limits, host=host, port=port, on_listening=listening
            )
        )
    except ListenError as exc:
        print(f"cursor-byok: {exc}", file=sys.stderr)
        return 2
    return 0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


async def probe_health(host: str, port: int, *, tls: bool = False, timeout: float = 1.0) -> bool:
    """GET /healthz with a bare socket (cheap: no HTTP client, no CA bundle); True on 200."""
    ctx: ssl.SSLContext | None = None
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
            try:
                request = f"GET {HEALTH_PATH} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n"
                writer.write(request.encode())
                await writer.drain()
                status_line = await reader.readline()
            finally:
                writer.close()
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    return status_line.split(b" ")[1:2] == [b"200"]


def probe_health_blocking(host: str, port: int, *, tls: bool = False, timeout: float = 1.0) -> bool:
    """Blocking twin of `probe_health`, for code outside an event loop."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            sock: socket.socket = raw
            if tls:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                sock = ctx.wrap_socket(raw)
            sock.sendall(
                f"GET {HEALTH_PATH} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n".encode()
            )
            status_line = sock.makefile("rb").readline()
    except (OSError, ssl.SSLError):
        return False
    return status_line.split(b" ")[1:2] == [b"200"]


async def _wait_healthy(
    host: str, port: int, tls: bool, timeout: float, task: asyncio.Task[None] | None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if task is not None and task.done():
            task.result()
            raise RuntimeError("server stopped during start-up")
        if await probe_health(host, port, tls=tls):
            return
        await asyncio.sleep(0.005)
    raise TimeoutError(f"server on {host}:{port} not healthy after {timeout} s")


@dataclass(frozen=True, slots=True)
class RunningServer:
    base_url: str
    host: str
    port: int
    app: ConnectApp | None = None  # in-process servers only
    startup_s: float = 0.0
    process: subprocess.Popen[bytes] | None = None  # child-process servers only


@asynccontextmanager
async def running_server(
    config: Config,
    handler: RunHandler,
    *,
    limits: TransportLimits | None = None,
    port: int | None = None,
    timeout: float = 10.0,
    authenticator: Authenticator | None = None,
) -> AsyncIterator[RunningServer]:
    """An in-process server (granian embedded in the current event loop) on a free loopback
    port, ready when entered."""
    host = config.server.host if is_loopback(config.server.host) else "127.0.0.1"
    port = port or free_port(host)
    check_bind(config, host)
    t0 = time.monotonic()
    app = connect_app(config, handler, limits=limits, authenticator=authenticator)
    server = _granian_server(app, config.server, host, port, quiet=True)
    task = asyncio.get_running_loop().create_task(server.serve())
    scheme = "https" if config.server.certificate else "http"
    url = url_of(scheme, host, port)
    try:
        await _wait_healthy(host, port, scheme == "https", timeout, task)
        yield RunningServer(url, host, port, app, time.monotonic() - t0)
    finally:
        server.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        await app.shutdown()


@contextmanager
def server_process(
    config_path: str | Path,
    *,
    handler: str,
    port: int | None = None,
    heartbeat: float | None = None,
    orphan_timeout: float | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 20.0,
) -> Iterator[RunningServer]:
    """A server in a child process (`python -m cursor_byok.launch`) on a free
    loopback port; `handler` is `module:attribute`. Waits for /healthz, stops it on exit."""
    config = load_config(config_path, env=env)
    host = config.server.host
    port = port or free_port(host)
    cmd = [sys.executable, "-m", "cursor_byok.launch", "--config", str(config_path)]
    cmd += ["--handler", handler, "--port", str(port)]
    if heartbeat is not None:
        cmd += ["--heartbeat", str(heartbeat)]
    if orphan_timeout is not None:
        cmd += ["--orphan-timeout", str(orphan_timeout)]
    scheme = "https" if config.server.certificate else "http"
    url = url_of(scheme, "127.0.0.1" if host == "localhost" else host, port)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})})
    try:
        tls = scheme == "https"
        probe_host = "127.0.0.1" if host == "localhost" else host
        while not probe_health_blocking(probe_host, port, tls=tls):
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with status {proc.returncode}")
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"server at {url} not healthy after {timeout} s")
            time.sleep(0.02)
        yield RunningServer(url, host, port, None, time.monotonic() - t0, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def load_handler(spec: str) -> RunHandler:
    module, _, attr = spec.partition(":")
    handler: RunHandler = getattr(importlib.import_module(module), attr or "handler")
    return handler


def main(argv: list[str] | None = None) -> int:
    """`python -m cursor_byok.launch --config FILE --handler module:attr`."""
    parser = argparse.ArgumentParser(prog="cursor_byok.launch")
    parser.add_argument("--config", required=True)
    parser.add_argument("--handler", required=True, help="module:attribute of a RunHandler")
    parser.add_argument("--host")
    parser.add_argument("--port", type=port_number)
    parser.add_argument("--heartbeat", type=float, help="server heartbeat interval, seconds")
    parser.add_argument("--orphan-timeout", type=float)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        check_bind(config, args.host or config.server.host)
    except ConfigError as exc:
        for line in exc.lines():
            print(f"cursor-byok: configuration error: {line}", file=sys.stderr)
        return 2
    overrides: dict[str, Any] = {}
    if args.heartbeat is not None:
        overrides["heartbeat_interval"] = args.heartbeat
    if args.orphan_timeout is not None:
        overrides["orphan_timeout"] = args.orphan_timeout
    limits = dataclasses.replace(transport_limits(config.server), **overrides)
    return serve(config, load_handler(args.handler), limits=limits, host=args.host, port=args.port)


if __name__ == "__main__":
    raise SystemExit(main())
