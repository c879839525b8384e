"""What llm/wire.py does with real HTTP/1.1 as servers and networks send it: chunked bodies,
early closes, interim (1xx) and redirect (3xx) responses, against loopback servers that send
crafted bytes (tests/support/raw_server.py). TLS and proxies: test_wire_tls.py.

Every failure must be a `WireError` with a clear message, and come at once: the clients here
have a 60 s read timeout and each exchange must end within 10 s, so a hang fails the test
instead of turning into a timeout."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from cursor_byok.llm.events import DoneEvent, ErrorEvent, StartEvent
from cursor_byok.llm.settings import ProviderSettings
from cursor_byok.llm.wire import WireClient, WireProtocolError, WireResponse
from tests.llm.test_http import KEY, REQUEST, SETTINGS, ToyAdapter, collect
from tests.support.raw_server import Act, scripted, split_every_byte

NO_HANG_S = 10.0
SSE = b"data: hel\n\ndata: lo\n\ndata: END\n\n"
CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def wire() -> WireClient:
    return WireClient(connect_timeout=5.0, read_timeout=60.0)


async def body_of(response: WireResponse) -> bytes:
    out = b""
    async with asyncio.timeout(NO_HANG_S):
        async for piece in response.chunks():
            out += piece
    await response.aclose()
    return out


async def fetch(client: WireClient, port: int) -> tuple[WireResponse, bytes]:
    async with asyncio.timeout(NO_HANG_S):
        response = await client.request("POST", f"http://127.0.0.1:{port}/v1", [], b"{}")
    return response, await body_of(response)


def toy(base_url: str, *, via_httpx: bool = False) -> ToyAdapter:
    settings = ProviderSettings(
        name="toy", api="faux", base_url=base_url, api_key=KEY, read_timeout_s=60.0
    )
    return ToyAdapter(settings, client=httpx.AsyncClient() if via_httpx else None)


async def toy_events(adapter: ToyAdapter) -> list[object]:
    async with asyncio.timeout(NO_HANG_S):
        events = await collect(adapter.call(REQUEST, SETTINGS))
    await adapter.aclose()
    return list(events)


# -- chunked bodies ----------------------------------------------------------------------------


async def test_a_chunked_body_read_one_byte_at_a_time() -> None:
    """Every boundary of the framing falls between two reads somewhere: inside a size line,
    between a size and its CRLF, inside the data, the CRLF after it, the last chunk and the
    trailers. The body comes out whole, and the connection is reused after it."""
    body = b"4;a=1\r\ndata\r\nA\r\n: 12345678\r\n0\r\nx-checksum: 9\r\n\r\n"
    script = [CHUNKED_HEAD, *split_every_byte(body)]
    async with scripted(script, keep_alive=True) as server:
        client = wire()
        for _ in range(2):
            response, data = await fetch(client, server.port)
            assert response.status == 200 and data == b"data: 12345678"
        assert server.connections == 1 and len(server.requests) == 2
        await client.aclose()


async def test_chunk_extensions_and_several_trailers_are_skipped() -> None:
    body = (
        b'5 ; name=value ; quoted="a;b"\r\nhello\r\n'
        b"1;flag\r\n!\r\n"
        b"0;last=1\r\nx-one: 1\r\nx-two: 2\r\n\r\n"
    )
    async with scripted([CHUNKED_HEAD + body], keep_alive=True) as server:
        client = wire()
        for _ in range(2):
            assert (await fetch(client, server.port))[1] == b"hello!"
        assert server.connections == 1  # the trailers ended the body cleanly
        await client.aclose()


@pytest.mark.parametrize("size", [b"-1", b"+5", b"0x5", b"5_0", b"", b" "])
async def test_a_chunk_size_that_is_not_hex_digits_is_refused(size: bytes) -> None:
    """`int(x, 16)` also takes signs, a 0x prefix and underscores: "5_0" would read 80 bytes."""
    reply = CHUNKED_HEAD + size + b"\r\n" + b"x" * 80 + b"\r\n0\r\n\r\n"
    async with scripted([reply]) as server:
        client = wire()
        with pytest.raises(WireProtocolError, match="bad chunk size"):
            await fetch(client, server.port)
        await client.aclose()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"HTTP/1.1 \xb200 OK\r\nContent-Length: 0\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nxx", "bad content-length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\nxx", "bad content-length"),
    ],
)
async def test_digits_that_are_not_ascii_digits_are_protocol_errors(
    reply: bytes, message: str
) -> None:
    """`"²".isdigit()` is true and `int("²")` raises ValueError: that must not escape."""
    async with scripted([reply]) as server:
        client = wire()
        with pytest.raises(WireProtocolError, match=message):
            await fetch(client, server.port)
        await client.aclose()


# -- early close -------------------------------------------------------------------------------

HEAD_200_LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n"


@pytest.mark.parametrize(
    ("sent", "message"),
    [
        (b"HTTP/1.1 20", "closed inside the response head"),
        (b"HTTP/1.1 200 OK\r\nContent-Type: text/ev", "closed inside the response head"),
        (CHUNKED_HEAD, "closed inside a chunk size line"),
        (CHUNKED_HEAD + b"1", "closed inside a chunk size line"),
        (CHUNKED_HEAD + b"9\r\ndata: a", "closed inside a chunk"),
        (CHUNKED_HEAD + b"9\r\ndata: a\n\n", "closed inside a chunk"),  # before its CRLF
        (CHUNKED_HEAD + b"9\r\ndata: a\n\n\r\n", "closed inside a chunk size line"),
        (CHUNKED_HEAD + b"0\r\nx-trailer: 1", "closed inside a trailer"),
        (HEAD_200_LENGTH + b"only ten b", "closed before the body's end"),
    ],
)
async def test_a_close_mid_response_is_a_clear_error_at_once(sent: bytes, message: str) -> None:
    async with scripted([sent, 0.05]) as server:
        client = wire()
        with pytest.raises(WireProtocolError, match=message):
            await fetch(client, server.port)
        await client.aclose()


@pytest.mark.parametrize("sent", [CHUNKED_HEAD + b"9\r\ndata: a\n\n\r\n5\r\nab", HEAD_200_LENGTH])
async def test_a_reset_mid_body_is_a_wire_error(sent: bytes) -> None:
    """ECONNRESET while the body streams: a `WireError` ("connection lost"), not a bare
    ConnectionResetError that the stream would report as undecodable."""
    async with scripted([sent, 0.05, Act.RESET]) as server:
        client = wire()
        with pytest.raises(WireProtocolError, match=r"connection lost mid-body.*reset"):
            await fetch(client, server.port)
        await client.aclose()


@pytest.mark.parametrize("reset", [False, True])
async def test_a_stream_cut_short_ends_the_model_call_with_a_clear_error(reset: bool) -> None:
    cut = [CHUNKED_HEAD + b"b\r\ndata: hel\n\n\r\n", 0.05]
    async with scripted([*cut, Act.RESET] if reset else cut) as server:
        events = await toy_events(toy(f"http://127.0.0.1:{server.port}"))
    assert isinstance(events[0], StartEvent)
    end = events[-1]
    assert isinstance(end, ErrorEvent) and end.message.text == "hel"
    expected = "connection lost mid-body" if reset else "closed inside a chunk size line"
    assert end.error_message.startswith("toy: connection lost mid-stream: ")
    assert expected in end.error_message


# -- interim (1xx) responses -------------------------------------------------------------------


async def test_interim_responses_before_the_final_one_are_skipped() -> None:
    reply = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </app.js>; rel=preload\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nX-Final: yes\r\nContent-Length: 5\r\n\r\nhello"
    )
    async with scripted([reply], keep_alive=True) as server:
        client = wire()
        for _ in range(2):
            response, data = await fetch(client, server.port)
            assert (response.status, data) == (200, b"hello")
            assert response.header("x-final") == "yes" and response.header("link") is None
        assert server.connections == 1
        await client.aclose()


async def test_a_close_after_an_interim_response_is_not_retried() -> None:
    """A reused connection closed before any byte is retried once (the request cannot have
    been processed), but a 100 Continue means the server took the request: no second try."""
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    interim_then_close = [b"HTTP/1.1 100 Continue\r\n\r\n", 0.05, Act.CLOSE]
    async with scripted([ok], interim_then_close, keep_alive=True) as server:
        client = wire()
        assert (await fetch(client, server.port))[1] == b"ok"
        with pytest.raises(WireProtocolError, match="closed after an interim 100 response"):
            await fetch(client, server.port)
        assert len(server.requests) == 2 and server.connections == 1
        await client.aclose()


async def test_101_switching_protocols_is_refused() -> None:
    """We never ask for an upgrade: what follows a 101 is not HTTP, so do not read it as SSE."""
    reply = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\ndata: END\n\n"
    async with scripted([reply, Act.HOLD]) as server:
        client = wire()
        with pytest.raises(WireProtocolError, match="101 Switching Protocols"):
            await fetch(client, server.port)
        await client.aclose()


# -- redirects (3xx) ---------------------------------------------------------------------------


@pytest.mark.parametrize("via_httpx", [False, True])
@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_is_an_error_naming_status_and_location(
    status: int, via_httpx: bool
) -> None:
    """Not followed: a POST of the prompt, with the key, would go wherever the provider's
    answer points. The error says where, so the operator can fix `base_url`."""
    async with scripted([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]) as target:
        location = f"http://127.0.0.1:{target.port}/moved/v1"
        reply = (
            f"HTTP/1.1 {status} Moved\r\nLocation: {location}\r\n"
            f"Content-Type: text/html\r\nContent-Length: 13\r\n\r\n<p>moved</p>\n"
        ).encode()
        async with scripted([reply]) as server:
            events = await toy_events(toy(f"http://127.0.0.1:{server.port}", via_httpx=via_httpx))
        assert target.connections == 0
    assert len(events) == 1 and isinstance(events[0], ErrorEvent)
    error = events[0]
    assert error.http_status == status and not error.transient
    assert error.error_message == (
        f"toy HTTP {status}: redirected to {location}; redirects are not followed, "
        f"set the provider's base_url to the final address"
    )


async def test_a_redirect_without_location_still_names_the_status() -> None:
    reply = b"HTTP/1.1 300 Multiple Choices\r\nContent-Length: 0\r\n\r\n"
    async with scripted([reply]) as server:
        events = await toy_events(toy(f"http://127.0.0.1:{server.port}"))
    assert len(events) == 1 and isinstance(events[0], ErrorEvent)
    assert events[0].error_message.startswith("toy HTTP 300: redirected (no location)")


async def test_a_2xx_stream_still_streams() -> None:
    """The redirect rule takes nothing from the success path: a 200 (and a 203) stream."""
    for status in (b"200 OK", b"203 Non-Authoritative Information"):
        reply = b"HTTP/1.1 " + status + b"\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
        async with scripted([reply]) as server:
            events = await toy_events(toy(f"http://127.0.0.1:{server.port}"))
        assert isinstance(events[-1], DoneEvent) and events[-1].message.text == "hello"
