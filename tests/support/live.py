"""Real processes for end-to-end tests: a scripted upstream in its own thread and our server
as a child process (`python -m cursor_byok serve`), both on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cursor_byok.launch import free_port, probe_health_blocking

from .brain import answer
from .upstream import FakeUpstream, ReplyFactory

REPO = Path(__file__).resolve().parents[2]


class ThreadedUpstream:
    """A FakeUpstream on its own event loop thread, so it outlives any one test's loop."""

    def __init__(self, default: ReplyFactory | None = answer) -> None:
        self.upstream = FakeUpstream(default)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> FakeUpstream:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.upstream.start(), self._loop).result(10)
        return self.upstream

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.upstream.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


def brain_config(upstream_url: str, *, db: Path | str, extra: str = "") -> str:
    return f"""
[server]
host = "127.0.0.1"
port = 8700
database = "{db}"
{extra}

[providers.brain]
api = "openai-chat"
base_url = "{upstream_url}/v1"

[models."brain-1"]
provider = "brain"
model = "brain-1"
context_window = 128000
max_output_tokens = 4096

[models."composer-test"]
provider = "brain"
model = "brain-1"
"""


@dataclass
class ServerProcess:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@contextlib.contextmanager
def server_process(
    config_text: str,
    workdir: Path,
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[ServerProcess]:
    """`cursor-byok serve` in a child process; waits for /healthz; stops it (SIGTERM) after.
    The configuration is `workdir`/cursor-byok.toml; the process runs in `cwd` (workdir)."""
    config = workdir / "cursor-byok.toml"
    config.write_text(config_text)
    port = port or free_port()
    log_path = workdir / f"server-{port}.log"
    cmd = [sys.executable, "-m", "cursor_byok", "serve", "--config", str(config)]
    cmd += ["--port", str(port)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd or workdir,
        )
    server = ServerProcess(f"http://127.0.0.1:{port}", port, proc, log_path)
    try:
        t0 = time.monotonic()
        while not probe_health_blocking("127.0.0.1", port):
            if proc.poll() is not None:
                raise RuntimeError(f"server exited ({proc.returncode}):\n{server.log()}")
            if time.monotonic() - t0 > 30:
                raise TimeoutError(f"server not healthy after 30 s:\n{server.log()}")
            time.sleep(0.05)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
