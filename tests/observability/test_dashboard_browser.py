"""The dashboard in a real headless Chromium, against a real SQLite store.

A tiny asyncio HTTP server mounts `Observability.get` as cursor-byok's server does: GET
/dashboard (public, with its CSP) and GET /dashboard/api/summary behind a bearer token.
Needs Debian's headless Chromium (scripts/install_browser.sh) and the `playwright` package; both
are required under CI (the test fails there instead of skipping).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cursor_byok.config import Config
from cursor_byok.observability.dashboard import JSON_CONTENT_TYPE
from cursor_byok.observability.routes import GET_ROUTES, Observability
from cursor_byok.store.sqlite import SQLiteStore

from .helpers import ALL_SECRETS, AUTH_TOKEN, planted_config, seed_store
from .pngcheck import color_stats

# scripts/install_browser.sh installs the headless shell; a machine that has only Debian's full
# browser runs the test with that one.
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
CHROMIUM = next((b for b in BROWSERS if os.path.exists(b)), BROWSERS[0])
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(os.environ.get("CURSOR_BYOK_ARTIFACTS", "/tmp/cursor-byok-artifacts"))


def _need_browser() -> None:
    missing = []
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install playwright)")
    if not os.path.exists(CHROMIUM):
        missing.append(f"{CHROMIUM} (run scripts/install_browser.sh)")
    if missing:
        message = "headless browser test needs " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@contextlib.asynccontextmanager
async def dashboard_server(store: SQLiteStore, config: Config) -> AsyncIterator[str]:
    requests: list[tuple[str, str]] = []
    obs = Observability(config, store)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                path, _, query = target.partition("?")
                requests.append((method, path))
                authorized = headers.get("authorization") == f"Bearer {config.server.auth_token}"
                extra: tuple[tuple[str, str], ...] = ()
                if method != "GET" or path not in GET_ROUTES:
                    status, ctype, body = 404, "text/plain", b"not found"
                elif not (obs.is_public(path) or authorized):
                    status, ctype = 401, JSON_CONTENT_TYPE
                    body = b'{"code":"unauthenticated","message":"missing or wrong token"}'
                else:
                    response = await obs.get(path, query)
                    assert response is not None
                    status, ctype = response.status, response.content_type
                    body, extra = response.body, response.headers
                writer.write(
                    f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\n"
                    f"content-length: {len(body)}\r\n".encode()
                    + b"".join(f"{k}: {v}\r\n".encode() for k, v in extra)
                    + b"\r\n"
                    + body
                )
                await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def test_dashboard_renders_tables_chart_and_errors(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import async_playwright

    config = planted_config()
    now = int(time.time() * 1000)
    async with (
        await SQLiteStore.open(tmp_path / "db.sqlite") as store,
        dashboard_server(store, config) as base,
        async_playwright() as pw,
    ):
        await seed_store(store, now)
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            console_errors: list[str] = []
            page.on(
                "console",
                lambda m: console_errors.append(m.text) if m.type == "error" else None,
            )
            page.on("pageerror", lambda e: console_errors.append(str(e)))

            # Without the token: the page loads (under its CSP), the API answers 401 and the
            # page asks for a token.
            first = await page.goto(f"{base}/dashboard")
            assert first is not None and first.status == 200
            assert "default-src 'none'" in first.headers["content-security-policy"]
            await page.wait_for_selector("#auth", state="visible", timeout=15_000)
            assert "401" in await page.inner_text("#banner")
            assert all("401" in e for e in console_errors), console_errors
            console_errors.clear()

            # Token given in the fragment (never sent to the server): the data loads.
            await page.goto(f"{base}/dashboard#token={AUTH_TOKEN}")
            await page.reload()  # a fragment-only navigation does not reload the page
            await page.wait_for_selector("body[data-loaded='1']", timeout=15_000)
            assert await page.is_hidden("#auth")
            assert AUTH_TOKEN not in page.url

            # The tables show the planted rows.
            call_ids = await page.eval_on_selector_all(
                "#calls tbody tr.call", "rows => rows.map(r => r.dataset.callId)"
            )
            assert call_ids == ["call-6", "call-5", "call-4", "call-3", "call-2", "call-1"]
            calls_text = await page.inner_text("#calls")
            for expected in ("gpt-test", "claude-test", "anthropic", "1,500", "83.3%", "0.0051"):
                assert expected in calls_text, expected
            error_rows = await page.eval_on_selector_all(
                "#calls tbody tr.error", "rows => rows.map(r => r.dataset.callId)"
            )
            assert error_rows == ["call-3"]
            error_text = await page.inner_text("#calls tr.error td.errtext")
            assert error_text.startswith("anthropic HTTP 401") and "***" in error_text
            bg = await page.eval_on_selector(
                "#calls tr.error td", "td => getComputedStyle(td).backgroundColor"
            )
            assert bg not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)"), bg
            conv_ids = await page.eval_on_selector_all(
                "#conversations tbody tr.conversation", "rows => rows.map(r => r.dataset.id)"
            )
            assert conv_ids == ["conv-beta-0002", "conv-alpha-0001"]
            assert "3" in await page.inner_text("#conversations tr[data-id='conv-alpha-0001']")
            totals = await page.inner_text("#totals")
            assert "errors" in totals and "cost (USD)" in totals

            # One chart per model, each with drawn content.
            charts = await page.eval_on_selector_all(
                "canvas.chart",
                """cs => cs.map(c => {
                    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                    let painted = 0;
                    const colours = new Set();
                    for (let i = 0; i < d.length; i += 4) {
                      if (d[i + 3] === 0) continue;
                      painted++;
                      colours.add(d[i] << 16 | d[i + 1] << 8 | d[i + 2]);
                    }
                    return {model: c.dataset.model, drawn: c.dataset.drawn, painted,
                            colours: colours.size, w: c.width, h: c.height};
                })""",
            )
            assert [c["model"] for c in charts] == ["anthropic/claude-test", "openai/gpt-test"]
            for c in charts:
                assert int(c["drawn"]) >= 20, c  # 30 one-minute buckets
                assert c["painted"] > 2000 and c["colours"] > 8, c

            # Secrets never reach the page.
            content = await page.content()
            for secret in ALL_SECRETS:
                assert secret not in content

            shot = await page.screenshot(full_page=True)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            (ARTIFACTS / "dashboard.png").write_bytes(shot)
            colours, non_background = color_stats(shot)
            assert colours > 50, colours
            assert non_background > 0.05, non_background
            assert not console_errors, console_errors
        finally:
            await browser.close()
