"""deploy/healthcheck.py, the image's HEALTHCHECK: 0 only for a 200 from /healthz, over http
or https with a certificate that names another host, and never through a configured proxy."""

from __future__ import annotations

import contextlib
import http.server
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.paths import REPO
from tests.support.live import server_process
from tests.support.raw_server import issued_cert

SCRIPT = REPO / "deploy" / "healthcheck.py"
CONFIG = """
[server]
host = "127.0.0.1"
database = "{db}"

[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[models.local]
provider = "local"
"""
# A proxy nobody listens on: a probe sent through it fails.
DEAD_PROXY = "http://127.0.0.1:9"


def check(url: str, **env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy",)}
    result = subprocess.run(
        [sys.executable, str(SCRIPT)],
        env={**clean, "CURSOR_BYOK_HEALTH_URL": url, **env},
        capture_output=True,
        timeout=30,
    )
    return result.returncode


class _Status(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def status_server(status: int, context: ssl.SSLContext | None = None) -> Iterator[int]:
    handler = type("Handler", (_Status,), {"status": status})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_ready_server_is_healthy_even_with_a_proxy_set(tmp_path: Path) -> None:
    with server_process(CONFIG.format(db=tmp_path / "db"), tmp_path) as srv:
        url = f"{srv.url}/healthz"
        assert check(url) == 0
        assert check(url, http_proxy=DEAD_PROXY, HTTP_PROXY=DEAD_PROXY) == 0


def test_not_ready_or_not_there_is_unhealthy() -> None:
    with status_server(503) as port:
        assert check(f"http://127.0.0.1:{port}/healthz") == 1
    assert check(f"http://127.0.0.1:{port}/healthz") == 1  # closed now


def test_https_with_a_certificate_for_the_public_name(tmp_path: Path) -> None:
    certs = issued_cert(tmp_path, "DNS:cursor-byok.example.com")
    with status_server(200, certs.server_context()) as port:
        url = f"https://127.0.0.1:{port}/healthz"
        assert check(url) == 0
        assert check(url, https_proxy=DEAD_PROXY, HTTPS_PROXY=DEAD_PROXY) == 0
