"""The server-side page fetch against a real HTTP server on loopback: a redirect it refuses, and
its bounds on size, time and redirects. Every form of a refused address, directly and after a
redirect, inside a namespace with only `lo`: test_fetch_netns.py."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest
from aiohttp import web

from cursor_byok.web.fetch import FetchLimits, IPAddress, PageFetcher, is_public_address
from cursor_byok.web.page_text import bounded_text, page_text
from cursor_byok.web.types import JobFailed, PageFetched, PageFetchJob

LOOP = ipaddress.ip_address("127.0.0.1")


def only_our_loopback(ip: IPAddress) -> bool:
    """The real policy, plus the test server's own address (nothing else on loopback)."""
    return ip == LOOP or is_public_address(ip)


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def page(_: web.Request) -> web.Response:
        return web.Response(
            text="<html><head><title>Hello</title></head>"
            "<body><p>Hi <b>there</b></p></body></html>",
            content_type="text/html",
        )

    async def big(_: web.Request) -> web.Response:
        return web.Response(text="x" * 50_000, content_type="text/plain")

    async def png(_: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n\x1a\n" + bytes(100), content_type="image/png")

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")

    async def hop(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def loop_forever(_: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    async def charset(request: web.Request) -> web.Response:
        body = request.query["body"].encode("latin-1")
        return web.Response(
            body=body, headers={"Content-Type": f"text/html; charset={request.query['cs']}"}
        )

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/charset", charset)
    app.router.add_get("/big", big)
    app.router.add_get("/slow", slow)
    app.router.add_get("/png", png)
    app.router.add_get("/hop", hop)
    app.router.add_get("/loop", loop_forever)
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


_MADE: list[PageFetcher] = []


@pytest.fixture(autouse=True)
async def _close_fetchers() -> AsyncIterator[None]:
    """Every fetcher a test made ends its page converter's workers."""
    yield
    while _MADE:
        await _MADE.pop().aclose()


def fetcher(**limits: float) -> PageFetcher:
    made = PageFetcher(enabled=True, limits=FetchLimits(**limits), allowed=only_our_loopback)  # type: ignore[arg-type]
    _MADE.append(made)
    return made


async def test_a_page_is_fetched_and_cleaned(site: str) -> None:
    got = await fetcher().fetch(PageFetchJob(url=f"{site}/page"))
    assert got == PageFetched(
        url=f"{site}/page",
        status=200,
        content_type="text/html; charset=utf-8",
        text="# Hello\n\nHi **there**",
    )


async def test_off_by_default_it_fetches_nothing(site: str) -> None:
    got = await PageFetcher(enabled=False).fetch(PageFetchJob(url=f"{site}/page"))
    assert got == JobFailed(
        message="this server does not fetch pages for clients ([web_fetch] server_side is off)"
    )


async def test_a_name_is_resolved_and_checked_before_connecting() -> None:
    got = await PageFetcher(enabled=True).fetch(PageFetchJob(url="http://localhost:9/x"))
    assert isinstance(got, JobFailed)
    assert got.message.startswith("refused: localhost resolves to a non-public address (")


async def test_a_redirect_to_a_non_public_address_is_refused(site: str) -> None:
    got = await fetcher().fetch(PageFetchJob(url=f"{site}/hop?to=http://127.0.0.2:9/secret"))
    assert got == JobFailed(
        message="refused: 127.0.0.2 is not a public address (127.0.0.2: loopback); the server "
        "fetches public addresses only"
    )


async def test_a_redirect_to_an_allowed_address_is_followed(site: str) -> None:
    got = await fetcher().fetch(PageFetchJob(url=f"{site}/hop?to=/page"))
    assert isinstance(got, PageFetched) and got.url == f"{site}/page"


async def test_other_schemes_are_refused() -> None:
    got = await fetcher().fetch(PageFetchJob(url="file:///etc/passwd"))
    assert got == JobFailed(
        message="only http:// and https:// URLs are fetched, not 'file:///etc/passwd'"
    )


async def test_redirects_are_bounded(site: str) -> None:
    got = await fetcher(max_redirects=3).fetch(PageFetchJob(url=f"{site}/loop"))
    assert got == JobFailed(message="more than 3 redirects")


async def test_size_is_bounded_and_the_cut_is_said(site: str) -> None:
    got = await fetcher(max_bytes=2048).fetch(PageFetchJob(url=f"{site}/big"))
    assert isinstance(got, PageFetched)
    assert got.text == "x" * 2048 + (
        "\n\n[Only the first 2048 bytes of the page were read (the server's limit); the rest "
        "is missing.]"
    )


async def test_time_is_bounded(site: str) -> None:
    got = await fetcher(timeout_s=0.5).fetch(PageFetchJob(url=f"{site}/slow"))
    assert got == JobFailed(message="no complete answer within 0.5 s")


def test_page_text_keeps_a_markdown_shape_and_drops_scripts() -> None:
    html = (
        "<html><head><title>T</title><style>p{}</style></head><body><script>x()</script>"
        "<h2>Use</h2><p>a <a href='https://e.x/y'>link</a>,<br>next</p><pre>a\n  b</pre>"
        "<table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr></table></body></html>"
    )
    assert page_text(html, "text/html") == (
        "# T\n\n## Use\n\na [link](https://e.x/y),\nnext\n\n"
        "```\na\n  b\n```\n\n| k | v |\n| 1 | 2 |"
    )
    assert page_text('{"a": 1}', "application/json") == '{"a": 1}'
    assert bounded_text("abc", 10) == ("abc", False)
    text, cut = bounded_text("a" * 50, 10)
    assert cut and text.startswith("a" * 10 + "\n\n[The page was cut here: 10 of its 50")


class _Pinned(PageFetcher):
    """Resolves `pinned.invalid` (a name no resolver knows) to the test server's address."""

    async def _addresses(self, host: str, port: int) -> list[IPAddress]:
        return [LOOP] if host == "pinned.invalid" else await super()._addresses(host, port)


async def test_the_connection_goes_to_the_checked_address(site: str) -> None:
    # aiohttp never looks the name up itself: it is handed the address that was checked.
    port = site.rsplit(":", 1)[1]
    fetch = _Pinned(enabled=True, allowed=only_our_loopback)
    _MADE.append(fetch)
    got = await fetch.fetch(PageFetchJob(url=f"http://pinned.invalid:{port}/page"))
    assert isinstance(got, PageFetched) and got.text == "# Hello\n\nHi **there**"


async def test_a_body_that_is_not_text_is_not_shown(site: str) -> None:
    got = await fetcher().fetch(PageFetchJob(url=f"{site}/png"))
    assert isinstance(got, PageFetched) and got.content_type == "image/png"
    assert got.text == "(The page is image/png, not text: its content is not shown.)"


@pytest.mark.parametrize(
    ("charset", "body", "text"),
    [
        ("undefined", "<p>caf\u00c3\u00a9</p>", "caf\u00e9"),  # Python's codec that always raises
        ("rot13", "<p>abc</p>", "abc"),  # a codec, not of text
        ("no-such-charset", "<p>ok</p>", "ok"),
        ("utf-8", "<p>caf\u00c3\u00a9 caf\u00e9</p>", "caf\u00e9 caf\ufffd"),  # mixed encodings
        ("windows-1251", "<p>\u00cf\u00f0\u00e8</p>", "\u041f\u0440\u0438"),
    ],
)
async def test_whatever_charset_a_page_claims_its_text_is_read(
    site: str, charset: str, body: str, text: str
) -> None:
    query = urlencode({"cs": charset, "body": body})
    got = await fetcher().fetch(PageFetchJob(url=f"{site}/charset?{query}"))
    assert isinstance(got, PageFetched), got
    assert got.text == text
