"""Hostile pages do not freeze the server: the REAL server process receives 4 pages of each
hostile shape (tests/support/hostile_pages.py) at once, both as the client's `fetch_args`
answer and as pages the server fetches itself from a loopback page server, while a poller
measures `/healthz` every 10 ms. HTML to text runs in worker processes killed at their
deadline (web/convert.py), so the event loop answers throughout: p99 under 50 ms (measured
22-26 ms on the shared 2-core machine, load average 6).

On 7a7e237, where the conversion ran on the event loop (the policy widened to the loopback
site by hand, its config without the new keys), the same test measured p99 72,089 ms, one
`/healthz` taking 138.6 s (docs/benchmarks-server.md, "Hostile pages")."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_queries import ide, query_of, respond, tool_prompt
from tests.e2e.test_shim import exec_of, exec_reply
from tests.e2e.test_web_tools import model_read, web_request
from tests.support.hostile_pages import SHAPES, normal_page, page
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

log = logging.getLogger(__name__)

PAGES_PER_SHAPE = 4
PAGE_BYTES = 200_000  # on 7a7e237: 2-25 s of the event loop for each nested shape
CONVERT_TIMEOUT_S = 1.0
P99_LIMIT_MS = 50.0
POLL_EVERY_S = 0.01


class PageSite:
    """A loopback site serving each shape's page, on its own thread and loop."""

    def __init__(self) -> None:
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    async def _start(self) -> None:
        async def shaped(request: web.Request) -> web.Response:
            shape = request.match_info["shape"]
            html = normal_page(20_000) if shape == "normal" else page(shape, PAGE_BYTES)
            return web.Response(text=html, content_type="text/html")

        app = web.Application()
        app.router.add_get("/{shape}/{n}", shaped)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    def __enter__(self) -> PageSite:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


_POLLER = """
import http.client, json, sys, threading, time
port, every = int(sys.argv[1]), float(sys.argv[2])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
out = []
while not stop.is_set():
    t0 = time.perf_counter()
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    response.read()
    out.append((time.time(), (time.perf_counter() - t0) * 1000, response.status))
    stop.wait(every)
json.dump(out, sys.stdout)
"""


class HealthPoller:
    """GET /healthz every POLL_EVERY_S on one keep-alive connection, timing each answer, in a
    process of its own: nothing in this test's process (its clients, the fake upstream, the
    page site) can hold it up."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.latencies_ms: list[float] = []
        self.when: list[float] = []
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> HealthPoller:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _POLLER, str(self.port), str(POLL_EVERY_S)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        out, _ = self._proc.communicate("", timeout=130)
        polls = json.loads(out)
        assert all(status == 200 for _, _, status in polls)
        self.when = [when for when, _, _ in polls]
        self.latencies_ms = [ms for _, ms, _ in polls]

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


@pytest.fixture(scope="module")
def site() -> Iterator[PageSite]:
    with PageSite() as s:
        yield s


@pytest.fixture(scope="module")
def hserver(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    work = tmp_path_factory.mktemp("hostile")
    extra = f"""question_timeout_s = 60
tool_timeout_s = 120

[web_fetch]
server_side = true
allowed_networks = ["127.0.0.1/32"]  # the loopback page site, nothing else
convert_timeout_s = {CONVERT_TIMEOUT_S}
max_text_chars = 2000
"""
    config = brain_config(upstream.base_url, db=work / "db", extra=extra)
    with server_process(config, work) as srv:
        yield srv


async def fetch_page(server: ServerProcess, url: str, result: a.FetchResult | None) -> str:
    """One WebFetch turn over HTTP/2: approve, answer the fetch (None: "Not implemented", so
    the server fetches it), and return the prompt."""
    prompt = tool_prompt("WebFetch", {"url": url})
    async with ide(server, "h2") as (send, reader):
        await send(web_request(prompt))
        asked = await reader.wait_for(query_of("web_fetch_request_query"), 60)
        approved = a.WebFetchRequestResponse(approved=a.WebFetchRequestResponse.Approved())
        await send(respond(asked.interaction_query.id, web_fetch_request_response=approved))
        sent = await reader.wait_for(exec_of("fetch_args"), 60)
        if result is None:
            result = a.FetchResult(error=a.FetchError(url=url, error="Not implemented"))
        await send(exec_reply(sent.exec_server_message.id, fetch_result=result))
        end = await reader.wait_end(120)
    assert end == {} and reader.turn_ended
    return prompt


def client_answer(url: str, html: str) -> a.FetchResult:
    ok = a.FetchSuccess(url=url, content=html, status_code=200, content_type="text/html")
    return a.FetchResult(success=ok)


async def test_hostile_pages_leave_healthz_quick(
    hserver: ServerProcess, upstream: FakeUpstream, site: PageSite
) -> None:
    prompts: list[str] = []
    phases: list[tuple[str, float, float]] = []
    # A first turn of each path before measuring: the server's first turn pays for things made
    # once (the provider's connection pool and TLS context, a page worker's start), ~0.1-0.2 s
    # of the loop here whatever the page, and that is not what this test is about.
    warm = f"http://127.0.0.1:{site.port}/normal/0"
    await fetch_page(hserver, warm, client_answer(warm, normal_page(20_000)))
    await fetch_page(hserver, warm, None)
    with HealthPoller(hserver.port) as poller:
        for path in ("client", "server"):
            for shape in SHAPES:
                turns = []
                for n in range(PAGES_PER_SHAPE):
                    url = f"http://127.0.0.1:{site.port}/{shape}/{path}{n}"
                    html = page(shape, PAGE_BYTES)
                    answer = client_answer(url, html) if path == "client" else None
                    turns.append(fetch_page(hserver, url, answer))
                t0 = time.time()
                prompts += await asyncio.gather(*turns)
                phases.append((f"{path} {shape}", t0, time.time()))
    read = [model_read(upstream, prompt)[0] for prompt in prompts]  # after: not while polling
    for name, t0, t1 in phases:
        slow = [
            f"{ms:.0f}@{w - t0:.2f}"
            for ms, w in zip(poller.latencies_ms, poller.when, strict=True)
            if t0 <= w <= t1 and ms > 20
        ]
        log.warning("%s: %.2f s; polls over 20 ms: %s", name, t1 - t0, slow)
    p50, p99 = poller.percentile(0.5), poller.percentile(0.99)
    worst = max(poller.latencies_ms)
    log.warning(
        "healthz over %d polls: p50 %.1f ms, p99 %.1f ms, max %.1f ms",
        len(poller.latencies_ms),
        p50,
        p99,
        worst,
    )
    assert len(poller.latencies_ms) > 200
    assert p99 < P99_LIMIT_MS, f"healthz p99 {p99:.1f} ms (p50 {p50:.1f}, max {worst:.1f})"
    assert len(read) == 2 * len(SHAPES) * PAGES_PER_SHAPE
    # Every page was read, or the model was told the conversion took too long.
    for text in read:
        assert text.startswith("Fetched http://127.0.0.1:") or (
            "took longer than 1 s ([web_fetch] convert_timeout_s)" in text
        ), text[:300]


def converter_workers() -> set[int]:
    """The pids of every live page worker on this machine (any server's)."""
    pids: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read()  # noqa: SIM115
            state = open(f"/proc/{entry}/stat").read().split(") ", 1)[1][0]  # noqa: SIM115
        except OSError:
            continue
        if b"cursor_byok.web.convert_worker" in cmdline and state != "Z":
            pids.add(int(entry))
    return pids


async def test_the_page_workers_end_with_the_server(upstream: FakeUpstream, tmp_path: Path) -> None:
    """Started at the first page, not before; gone once the server stopped (SIGTERM)."""
    before = converter_workers()
    config = brain_config(upstream.base_url, db=tmp_path / "db")
    with server_process(config, tmp_path) as server:
        assert converter_workers() == before  # nothing starts with the server
        url = "https://docs.example.com/lifecycle"
        await fetch_page(server, url, client_answer(url, normal_page(5_000)))
        mine = converter_workers() - before
        assert len(mine) == 1
    deadline = time.monotonic() + 10
    while mine & converter_workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not mine & converter_workers()
