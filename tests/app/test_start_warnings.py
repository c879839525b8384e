"""`cursor-byok serve` says at start what would otherwise show only when a client fails (no
models, a provider nothing answers at), keeps serving, and says one line when it stops
(issue 13, points 11 and 13)."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cursor_byok import start_warnings
from cursor_byok.config import parse_config
from cursor_byok.launch import free_port, probe_health_blocking
from cursor_byok.start_warnings import Target, probe
from cursor_byok.starter_config import STARTER_LOCAL_URL, starter_config

STOPPED = r"INFO cursor_byok: stopped \(uptime \d+ s\)$"


class Serve:
    """A `cursor-byok serve` child process whose stderr is collected line by line."""

    def __init__(self, config: Path, port: int) -> None:
        self.port = port
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cursor_byok", "serve", "--config", str(config)],
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, needle: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if needle in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"no line with {needle!r} in {self.lines}")

    def stop(self, sig: signal.Signals) -> int:
        self.proc.send_signal(sig)
        status = self.proc.wait(30)
        self._reader.join(10)
        return status


@contextmanager
def serving(config: Path, port: int) -> Iterator[Serve]:
    server = Serve(config, port)
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def write(tmp_path: Path, body: str) -> tuple[Path, int]:
    port = free_port()
    cfg = tmp_path / "cursor-byok.toml"
    cfg.write_text(f'[server]\nport = {port}\ndatabase = "{tmp_path / "byok.db"}"\n{body}')
    return cfg, port


def get(port: int, path: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        status: int = response.status
        return status


def test_serve_with_no_models_warns_keeps_serving_and_says_stopped(tmp_path: Path) -> None:
    cfg, port = write(tmp_path, "")
    with serving(cfg, port) as server:
        line = server.wait_for("WARNING")
        assert line.endswith(
            "WARNING cursor_byok: no models configured: clients will show an empty model list; "
            f"add a [models.<id>] section, then run `cursor-byok doctor --config {cfg}`"
        )
        assert probe_health_blocking("127.0.0.1", port)
        assert get(port, "/") == 200
        assert server.stop(signal.SIGTERM) == 0
    assert [ln for ln in server.lines if " WARNING " in ln] == [line]  # one line, only one
    assert re.search(STOPPED, server.lines[-1]), server.lines


def test_serve_with_a_provider_nothing_answers_at(tmp_path: Path) -> None:
    closed = free_port()  # nothing listens there
    cfg, port = write(
        tmp_path,
        f'[providers.lab]\napi = "openai-chat"\nbase_url = "http://127.0.0.1:{closed}/v1"\n'
        '[models.m]\nprovider = "lab"\n',
    )
    with serving(cfg, port) as server:
        line = server.wait_for("WARNING")
        assert line.endswith(
            f"WARNING cursor_byok: provider lab: nothing answers at http://127.0.0.1:{closed}/v1 "
            "(connection refused); calls to its models will fail until it does. "
            f"Run `cursor-byok doctor --config {cfg}`"
        )
        assert probe_health_blocking("127.0.0.1", port)
        assert server.stop(signal.SIGINT) == 0
    assert re.search(STOPPED, server.lines[-1]), server.lines


def test_a_provider_that_answers_gets_no_warning(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        config = parse_config(
            f'[providers.up]\napi = "openai-chat"\n'
            f'base_url = "http://127.0.0.1:{listener.getsockname()[1]}/v1"\n'
            '[models.m]\nprovider = "up"\n',
            env={},
        )
        assert asyncio.run(start_warnings.start_warnings(config)) == []


def test_the_starters_local_server_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert f'base_url = "{STARTER_LOCAL_URL}"' in starter_config()
    # The starter's own port may be taken on a test machine: the same check on a closed one.
    url = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setattr(start_warnings, "STARTER_LOCAL_URL", url)
    config = parse_config(
        starter_config().replace(STARTER_LOCAL_URL, url), env={}, path="cursor-byok.toml"
    )
    assert asyncio.run(start_warnings.start_warnings(config)) == [
        f"provider local: nothing answers at {url} (connection refused), the starter "
        "configuration's local model server: start llama-server there, or point "
        "providers.local.base_url at your server; then run "
        "`cursor-byok doctor --config cursor-byok.toml`"
    ]


def test_the_probe_is_bounded_when_a_connect_hangs() -> None:
    # A listener whose accept queue is full drops further SYNs: the connect hangs.
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        held = []
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            held.append(s)
        time.sleep(0.2)
        try:
            t0 = time.monotonic()
            reason = asyncio.run(probe(Target("127.0.0.1", port), budget_s=0.5))
            elapsed = time.monotonic() - t0
        finally:
            for s in held:
                s.close()
    assert reason == "no connection within 0.5 s"
    assert elapsed < 3.0  # the budget plus a wide margin for a busy machine


def test_a_proxy_is_probed_instead_and_its_password_never_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:pw-PLANTED@127.0.0.1:3128")
    target = start_warnings.target_of("https://api.openai.com/v1")
    assert target == Target("127.0.0.1", 3128, "127.0.0.1:3128")
    assert start_warnings.target_of("http://127.0.0.1:8080/v1") == Target("127.0.0.1", 8080)
