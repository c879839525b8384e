"""The dashboard in a real headless Chromium, against a real SQLite store.

A tiny asyncio HTTP server mounts `Observability.get` as cursor-byok's server does: GET
/dashboard (public, with its CSP) and its JSON behind a bearer token. The assertions read the
rendered page: failed runs listed with their message, axis labels, cell widths, the no-prices
hints, the conversation drill-down, and user text that stays text. Screenshots are kept in
$CURSOR_BYOK_ARTIFACTS (default tests/artifacts/, ignored by git).
Needs Debian's headless Chromium (scripts/install_browser.sh) and the `playwright` package; both are
required under CI (the test fails there instead of skipping).
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
from cursor_byok.store.api import RunOutcomeRecord
from cursor_byok.store.sqlite import SQLiteStore
from tests.paths import REPO

from .helpers import ALL_SECRETS, AUTH_TOKEN, call_record, planted_config, seed_store
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
ARTIFACTS = Path(os.environ.get("CURSOR_BYOK_ARTIFACTS") or REPO / "tests" / "artifacts")
UNKNOWN_MODEL = "unknown model 'gpt-9'; this server offers: claude, gem, gpt"
XSS_TITLE = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2> fix it"
LONG_ERROR = (
    'anthropic HTTP 400: {"type":"error","error":{"type":"invalid_request_error","message":'
    '"messages.1.content.0.tool_use.input: Input should be a valid dictionary; see '
    "https://docs.example.com/en/api/errors-and-a-very-long-url-" + "x" * 60 + '"}}'
)

# Per element kind, those whose content is wider than the box the layout gave them, and the
# table boxes that cut their table off at the right edge.
OVERFLOWS_JS = """() => {
  const out = [];
  for (const w of document.querySelectorAll('.table-wrap')) {
    if (w.offsetParent && w.scrollWidth > w.clientWidth)
      out.push(['table-wrap', w.querySelector('table').id, w.scrollWidth, w.clientWidth]);
  }
  for (const c of document.querySelectorAll('td, th')) {
    if (c.offsetParent && c.scrollWidth > c.clientWidth)
      out.push([c.tagName, c.className, c.scrollWidth, c.clientWidth, c.textContent.slice(0, 40)]);
  }
  return out;
}"""


async def seed_runs_and_more(store: SQLiteStore, now: int) -> None:
    """Besides seed_store: a run refused for its model (no call, no commit) whose title is an
    HTML injection, an ok run that names conv-alpha, a call with a long unbreakable error, and
    a model without prices whose counts are tiny (its axis once read 0, 0, 1, 1, 1)."""
    await store.save_run_outcome(
        RunOutcomeRecord(
            request_id="run-bad",
            conversation_id="conv-gamma-0003",
            outcome="failed",
            finished_at_ms=now - 90_000,
            title=XSS_TITLE,
            model="gpt-9",
            error=UNKNOWN_MODEL,
        )
    )
    await store.save_run_outcome(
        RunOutcomeRecord(
            request_id="run-ok",
            conversation_id="conv-alpha-0001",
            outcome="ok",
            finished_at_ms=now - 29 * 60_000,
            title="Refactor the parser",
            model="gpt",
            provider="openai",
            llm_calls=2,
            input_tokens=1400,
            output_tokens=750,
            cost_usd=0.0099,
        )
    )
    await store.save_llm_call(
        call_record(
            "call-long",
            conversation_id="conv-beta-0002",
            provider="anthropic",
            model="claude-test",
            status="failed",
            created_at_ms=now - 3 * 60_000,
            input_tokens=1,
            output_tokens=1,
            cache_read=0,
            cost_usd=None,
            error=LONG_ERROR,
        )
    )
    # A call made on a fallback model (its id names the call it stands in for).
    await store.save_llm_call(
        call_record(
            "conv-beta-0002:1:llm1:fb1",
            conversation_id="conv-beta-0002",
            created_at_ms=now - 3 * 60_000 + 1,
            input_tokens=1,
            output_tokens=1,
            cache_read=0,
            cost_usd=0.0001,
        )
    )
    await store.save_llm_call(
        call_record(
            "call-gem",
            conversation_id="conv-alpha-0001",
            provider="gemini",
            model="gemini-test",
            created_at_ms=now - 2 * 60_000,
            input_tokens=1,
            output_tokens=0,
            cache_read=0,
            reasoning=0,
            cost_usd=None,
        )
    )


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
        await seed_runs_and_more(store, now)
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
            assert call_ids == [
                "call-6",
                "call-5",
                "call-gem",
                "conv-beta-0002:1:llm1:fb1",
                "call-long",
                "call-4",
                "call-3",
                "call-2",
                "call-1",
            ]
            calls_text = await page.inner_text("#calls")
            for expected in ("gpt-test", "claude-test", "anthropic", "1,500", "83.3%", "0.0051"):
                assert expected in calls_text, expected
            error_rows = await page.eval_on_selector_all(
                "#calls tbody tr.error", "rows => rows.map(r => r.dataset.callId)"
            )
            assert error_rows == ["call-long", "call-3"]
            error_texts = await page.eval_on_selector_all(
                "#calls tr.errrow td.errtext", "tds => tds.map(td => td.textContent)"
            )
            assert error_texts[0] == LONG_ERROR  # whole, wrapped, not cut off
            assert error_texts[1].startswith("anthropic HTTP 401") and "***" in error_texts[1]
            bg = await page.eval_on_selector(
                "#calls tr.error td", "td => getComputedStyle(td).backgroundColor"
            )
            assert bg not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)"), bg

            # Point 15: the refused run is an error on the page, with its message.
            failed = await page.inner_text("#totals [data-total='failed-runs']")
            assert failed.split()[0] == "1" and "failed runs" in failed
            assert await page.eval_on_selector(
                "#totals [data-total='failed-runs']", "c => c.classList.contains('bad')"
            )
            run_ids = await page.eval_on_selector_all(
                "#runs tbody tr.run.error", "rows => rows.map(r => r.dataset.requestId)"
            )
            assert run_ids == ["run-bad"]
            assert await page.inner_text("#runs tr.run-error td.errtext") == UNKNOWN_MODEL
            assert "gpt-9" in await page.inner_text("#runs tr[data-request-id='run-bad']")

            # Point 17: conversations have a title, model, turns, tokens, cost, last error.
            conv_ids = await page.eval_on_selector_all(
                "#conversations tbody tr.conversation", "rows => rows.map(r => r.dataset.id)"
            )
            assert conv_ids == ["conv-beta-0002", "conv-alpha-0001", "conv-gamma-0003"]
            alpha = await page.inner_text("#conversations tr[data-id='conv-alpha-0001']")
            for expected in ("Refactor the parser", "gpt", "3,764", "0.00991"):
                assert expected in alpha, (expected, alpha)
            gamma = await page.inner_text("#conversations tr[data-id='conv-gamma-0003']")
            assert XSS_TITLE in gamma and "unknown model 'gpt-9'" in gamma
            beta_error = await page.inner_text(
                "#conversations tr[data-id='conv-beta-0002'] td.lasterr"
            )
            assert beta_error.startswith("anthropic HTTP 400") and beta_error.endswith("…")
            # User text is text: nothing it holds became an element or ran.
            assert await page.evaluate("() => window.__pwned") is None
            assert await page.evaluate("() => document.querySelectorAll('main img').length") == 0
            assert await page.evaluate("() => document.scripts.length") == 1

            # Point 16: axis labels are unique, no cell is wider than its column, no table is
            # cut off, and a model without prices says so instead of showing $0.
            ticks = await page.eval_on_selector_all(
                "canvas.chart",
                """cs => cs.map(c => [c.dataset.model, JSON.parse(c.dataset.yTicks),
                                      JSON.parse(c.dataset.costTicks)])""",
            )
            for model, left, right in ticks:
                assert len(left) >= 2 and len(set(left)) == len(left), (model, left)
                assert len(set(right)) == len(right), (model, right)
            by_model = {m: (left, right) for m, left, right in ticks}
            assert by_model["gemini/gemini-test"] == (["0", "1"], [])
            # Costs as stored: gemini-test's calls have none (no cost axis); one of
            # claude-test's has, so its chart draws cost and says how many calls had none.
            assert by_model["anthropic/claude-test"][1][0] == "$0"
            assert by_model["openai/gpt-test"][1][0] == "$0"
            assert await page.evaluate(OVERFLOWS_JS) == []
            # When the prices changed: under the chart, each set of prices with its first call.
            spans = await page.eval_on_selector_all(
                ".prices[data-model='openai/gpt-test'] .price-span",
                "ss => ss.map(s => s.textContent)",
            )
            assert len(spans) == 2, spans
            assert spans[0].startswith("since ") and "no prices recorded (4 calls)" in spans[0]
            assert spans[1].startswith("from ")
            assert "input $2, output $8, cache read $0.5 per Mtok (1 call)" in spans[1]
            hints = await page.eval_on_selector_all(
                ".chart-box",
                "bs => bs.map(b => [b.dataset.model, !!b.querySelector('.no-prices')])",
            )
            assert hints == [
                ["anthropic/claude-test", True],
                ["gemini/gemini-test", True],
                ["openai/gpt-test", False],
            ]
            hint = await page.inner_text(".chart-box[data-model='gemini/gemini-test'] h3")
            assert "no prices" in hint and "$0" not in hint
            partly = await page.inner_text(".chart-box[data-model='anthropic/claude-test'] h3")
            assert "2 calls made without prices, not counted" in partly
            unpriced = await page.eval_on_selector(
                "#calls tr[data-call-id='call-3'] td.no-prices",
                "td => [td.textContent, td.title]",
            )
            assert unpriced[0] == "—" and "no prices" in unpriced[1]
            assert "without prices" in await page.inner_text("#totals [data-total='cost']")
            mark = await page.eval_on_selector(
                "#calls tr[data-call-id='conv-beta-0002:1:llm1:fb1'] .pill.fallback",
                "p => [p.textContent, p.title]",
            )
            assert mark == ["fallback", "fallback for call conv-beta-0002:1:llm1"]
            assert (
                await page.eval_on_selector_all(
                    "#calls tr:not([data-call-id='conv-beta-0002:1:llm1:fb1']) .pill.fallback",
                    "ps => ps.length",
                )
                == 0
            )
            fallbacks = await page.inner_text("#totals [data-total='fallbacks'] .v")
            assert fallbacks == "1"

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
            assert [c["model"] for c in charts] == [
                "anthropic/claude-test",
                "gemini/gemini-test",
                "openai/gpt-test",
            ]
            for c in charts:
                assert int(c["drawn"]) >= 20, c  # 30 one-minute buckets
                if c["model"] != "gemini/gemini-test":  # one token: one bar
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

            # Point 17: one conversation opens with its runs and calls only.
            assert await page.is_hidden("#conversation")
            await page.click("#conversations tr[data-id='conv-alpha-0001']")
            await page.wait_for_selector("#conversation[data-loaded='1']", timeout=15_000)
            assert await page.inner_text("#conv-title") == "Refactor the parser\nconv-alpha-0001"
            meta = await page.inner_text("#conv-meta")
            for expected in ("model gpt", "turns 1", "runs 1", "calls 5", "tokens 3,764"):
                assert expected in meta, (expected, meta)
            drill_calls = await page.eval_on_selector_all(
                "#conv-calls tbody tr.call", "rows => rows.map(r => r.dataset.callId)"
            )
            assert drill_calls == ["call-6", "call-5", "call-gem", "call-2", "call-1"]
            drill_runs = await page.eval_on_selector_all(
                "#conv-runs tbody tr.run", "rows => rows.map(r => r.dataset.requestId)"
            )
            assert drill_runs == ["run-ok"]
            assert await page.evaluate(OVERFLOWS_JS) == []
            await page.click("#conversations tr[data-id='conv-gamma-0003']")
            await page.wait_for_function(
                "() => document.getElementById('conversation').dataset.id === 'conv-gamma-0003'"
            )
            assert (await page.inner_text("#conv-title")).startswith(XSS_TITLE)
            assert UNKNOWN_MODEL in await page.inner_text("#conv-error")
            assert await page.evaluate("() => window.__pwned") is None
            (ARTIFACTS / "dashboard-conversation.png").write_bytes(
                await page.screenshot(full_page=True)
            )
            await page.click("#conv-close")
            assert await page.is_hidden("#conversation")
            for secret in ALL_SECRETS:
                assert secret not in await page.content()
            assert not console_errors, console_errors
        finally:
            await browser.close()
