"""docs/deploy.md's nginx site, taken from the doc, in front of a real server: TLS ends at
nginx, and a whole turn goes through it on the HTTP/1.1 shim (RunSSE streaming, BidiAppend),
with the bearer token passed on.

Needs Debian's nginx (`apt-get install nginx-light`); skipped, with the reason, without it.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cursor_byok.launch import free_port, probe_health_blocking
from tests.e2e.test_shim import ShimRun, run_request, unique
from tests.paths import REPO
from tests.support import connect_client as cc
from tests.support.live import ThreadedUpstream, brain_config, server_process
from tests.support.raw_server import issued_cert

DOC = (REPO / "docs" / "deploy.md").read_text()
TOKEN = "proxy-test-token"


def tls_site() -> str:
    """The doc's nginx site that terminates TLS (the "TLS" section; "Replicas" has its own)."""
    (site,) = [s for s in re.findall(r"```nginx\n(.*?)```", DOC, flags=re.S) if "443 ssl" in s]
    return str(site)


def doc_location() -> str:
    (location,) = re.findall(r"^    location / \{\n.*?^    \}\n", tls_site(), flags=re.S | re.M)
    return str(location)


@contextlib.contextmanager
def nginx(tmp: Path, upstream_port: int, cert: Path, key: Path) -> Iterator[int]:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        pytest.skip("nginx is not installed (apt-get install nginx-light)")
    port = free_port()
    location = doc_location().replace("127.0.0.1:8700", f"127.0.0.1:{upstream_port}")
    head = tls_site().split("    location / {", 1)[0]
    head = head.replace("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;")
    head = re.sub(r"ssl_certificate .*;", f"ssl_certificate {cert};", head)
    head = re.sub(r"ssl_certificate_key .*;", f"ssl_certificate_key {key};", head)
    (tmp / "nginx.conf").write_text(
        f"daemon off;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log;\nevents {{}}\n"
        f"http {{\n  access_log off;\n  client_body_temp_path {tmp}/body;\n"
        f"  proxy_temp_path {tmp}/proxy;\n{head}{location}}}\n}}\n"
    )
    proc = subprocess.Popen(
        [binary, "-p", str(tmp), "-c", str(tmp / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not probe_health_blocking("127.0.0.1", port, tls=True):
            if proc.poll() is not None or time.monotonic() > deadline:
                _, err = proc.communicate(timeout=5) if proc.poll() is not None else (b"", b"")
                pytest.fail(f"nginx did not start: {err.decode(errors='replace')}")
            time.sleep(0.1)
        yield port
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_a_turn_through_the_docs_nginx_site(tmp_path: Path) -> None:
    certs = issued_cert(tmp_path, "IP:127.0.0.1")
    extra = f'http2 = false\nauth_token = "{TOKEN}"'
    with ThreadedUpstream() as upstream:
        config = brain_config(upstream.base_url, db=tmp_path / "db", extra=extra)
        with (
            server_process(config, tmp_path) as server,
            nginx(tmp_path, server.port, certs.cert, certs.key) as port,
        ):
            context = ssl.create_default_context(cafile=str(certs.ca))
            async with httpx.AsyncClient(
                base_url=f"https://127.0.0.1:{port}", verify=context, timeout=30
            ) as client:
                unauthorized = await client.get("/metrics")
                assert unauthorized.status_code == 401
                # The brain pauses 2 s across its chunks: a buffering proxy would hand them
                # over at once, at the end. (The server's `X-Accel-Buffering: no` keeps nginx
                # from buffering even without the site's `proxy_buffering off`.)
                prompt = unique("through nginx [slow 2]")
                run = ShimRun(client, token=TOKEN)
                async with run.subscribe() as reader:
                    await run.append(run_request(prompt))
                    end = await reader.wait_end()
    assert end == {}, end
    assert reader.turn_ended
    assert "".join(reader.texts) == f"You said: {prompt}"
    texts = [t for t, m in reader.events if m.interaction_update.HasField("text_delta")]
    assert len(texts) > 1
    assert texts[-1] - texts[0] > 0.8, texts  # streamed through the proxy, not held back


async def test_behind_the_docs_nginx_site_each_client_has_its_own_allowance(
    tmp_path: Path,
) -> None:
    """The doc's site forwards the client's address and `trusted_proxies` names nginx: two
    clients behind it each get their own runs-waiting allowance, and a spoofed
    X-Forwarded-For (the client's own hops, left of the one nginx appends) changes nothing.
    Keyed by peer, both would share nginx's one allowance (issue 27, point 6)."""
    certs = issued_cert(tmp_path, "IP:127.0.0.1")
    extra = (
        f'http2 = false\nauth_token = "{TOKEN}"\nunstarted_runs_per_client = 2\n'
        'trusted_proxies = ["127.0.0.1/32"]'
    )
    with ThreadedUpstream() as upstream:
        config = brain_config(upstream.base_url, db=tmp_path / "db", extra=extra)
        with (
            server_process(config, tmp_path) as server,
            nginx(tmp_path, server.port, certs.cert, certs.key) as port,
        ):
            context = ssl.create_default_context(cafile=str(certs.ca))

            async def waiting_runs(source: str, count: int) -> list[int]:
                transport = httpx.AsyncHTTPTransport(local_address=source, verify=context)
                async with httpx.AsyncClient(
                    base_url=f"https://127.0.0.1:{port}", transport=transport, timeout=30
                ) as client:
                    statuses = []
                    for n in range(count):
                        spoof = {"x-forwarded-for": f"10.3.0.{n}"}
                        resp = await cc.append(
                            client, unique("rid"), 1, cc.heartbeat(), token=TOKEN, headers=spoof
                        )
                        statuses.append(resp.status_code)
                    return statuses

            assert await waiting_runs("127.0.0.5", 3) == [200, 200, 429]
            assert await waiting_runs("127.0.0.6", 2) == [200, 200]
