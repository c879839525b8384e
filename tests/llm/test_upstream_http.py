"""Provider calls (an adapter over llm/upstream.py, aiohttp) against loopback servers that send
crafted bytes (tests/support/raw_server.py): framings, chunked bodies, early closes, interim
(1xx) and redirect (3xx) responses, broken heads, timeouts. TLS and proxies:
test_upstream_tls.py.

Every failure must end the call with one clear error event, and come at once: the adapters
here have a 60 s read timeout and each call must end within 10 s, so a hang fails the test
instead of turning into a timeout."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import msgspec
import pytest
from aiohttp.http_writer import StreamWriter

from cursor_byok.llm.events import DoneEvent, ErrorEvent, ResponseEvent, StartEvent
from cursor_byok.llm.http import MAX_ERROR_BODY
from cursor_byok.llm.settings import ProviderSettings
from cursor_byok.llm.stream import PreparedRequest
from cursor_byok.llm.upstream import SPLIT_BODY_FROM, ConnectFailed, ProtocolError
from tests.llm.test_http import KEY, REQUEST, SETTINGS, ToyAdapter, collect
from tests.support.raw_server import Act, Step, scripted, split_every_byte

NO_HANG_S = 10.0
SSE = b"data: hel\n\ndata: lo\n\ndata: END\n\n"
OK_SSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
HEAD_200_LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n"


def toy(
    port: int,
    *,
    read: float = 60.0,
    connect: float = 5.0,
    scheme: str = "http",
    host: str = "127.0.0.1",
    base_url: str | None = None,
) -> ToyAdapter:
    settings = ProviderSettings(
        name="toy",
        api="faux",
        base_url=base_url or f"{scheme}://{host}:{port}",
        api_key=KEY,
        read_timeout_s=read,
        connect_timeout_s=connect,
    )
    return ToyAdapter(settings)


async def call(adapter: ToyAdapter) -> list[ResponseEvent]:
    """One model call, and the end of its reading task: after the terminal event that task
    reads the rest of the body (trailers, say) so the connection can go back to the pool."""
    async with asyncio.timeout(NO_HANG_S):
        stream = adapter.call(REQUEST, SETTINGS)
        events = await collect(stream)
        if stream._task is not None:
            await stream._task
    return events


async def once(port: int, **kw: Any) -> list[ResponseEvent]:
    adapter = toy(port, **kw)
    try:
        return await call(adapter)
    finally:
        await adapter.aclose()


def text_of(events: list[ResponseEvent]) -> str:
    end = events[-1]
    assert isinstance(end, DoneEvent), end
    return end.message.text


def error_of(events: list[ResponseEvent]) -> ErrorEvent:
    end = events[-1]
    assert isinstance(end, ErrorEvent), end
    assert KEY not in end.error_message
    return end


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


# -- framings and what is sent -----------------------------------------------------------------


class BigBody(ToyAdapter):
    def prepare(self, request: Any, settings: Any) -> PreparedRequest:
        prepared = super().prepare(request, settings)
        return msgspec.structs.replace(prepared, body=b'{"x":"' + b"y" * 300_000 + b'"}')


async def test_a_large_body_goes_after_its_head_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """From SPLIT_BODY_FROM on the head is written alone and the body is never joined to it
    (aiohttp's coalescing copies the whole body on every call); the bytes sent are the
    same."""
    joined: list[int] = []
    original = StreamWriter._writelines

    def counting(self: StreamWriter, chunks: Any) -> None:
        joined.append(sum(len(c) for c in chunks))
        original(self, chunks)

    monkeypatch.setattr(StreamWriter, "_writelines", counting)
    async with scripted([OK_SSE]) as server:
        adapter = BigBody(toy(server.port).provider)
        assert text_of(await call(adapter)) == "hello"
        await adapter.aclose()
    body = adapter.prepare(REQUEST, SETTINGS).body
    sent = server.requests[0]
    head, rest = sent.split(b"\r\n\r\n", 1)
    assert rest == body and len(body) >= SPLIT_BODY_FROM
    lines = head.lower().split(b"\r\n")
    assert f"content-length: {len(body)}".encode() in lines
    assert not any(line.startswith(b"content-type") for line in lines)  # nothing added
    assert all(n < SPLIT_BODY_FROM for n in joined)  # the body was never coalesced


async def test_chunked_length_and_close_bodies_and_the_request_sent() -> None:
    replies: list[list[Step]] = [
        [CHUNKED_HEAD + chunked(b"data: a\n\n", b"data: END\n\n")],
        [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)],
        [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\ndata: until the end\n\ndata: END\n\n",
         Act.CLOSE],
    ]  # fmt: skip
    async with scripted(*replies, keep_alive=True) as server:
        adapter = toy(server.port)
        assert text_of(await call(adapter)) == "a"
        assert text_of(await call(adapter)) == "hello"
        assert text_of(await call(adapter)) == "until the end"
        await adapter.aclose()
    assert server.connections == 1  # the first two bodies ended cleanly: one connection
    sent = server.requests[0]
    head = sent.split(b"\r\n\r\n", 1)[0].lower().split(b"\r\n")
    assert head[0] == b"post /toy http/1.1"
    assert f"host: 127.0.0.1:{server.port}".encode() in head
    assert b"content-length: 7" in head and sent.endswith(b'\r\n\r\n{"x":1}')
    assert b"user-agent: cursor-byok" in head and b"accept-encoding: identity" in head
    assert not any(line.startswith(b"content-type") for line in head)  # nothing added


async def test_a_chunked_body_read_one_byte_at_a_time() -> None:
    """Every boundary of the framing falls between two reads somewhere: inside a size line,
    between a size and its CRLF, inside the data, the CRLF after it, the last chunk and the
    trailers. The body comes out whole, and the connection is reused after it."""
    body = b"a;a=1\r\ndata: 1234\r\n11\r\n5678\n\ndata: END\n\n\r\n0\r\nx-checksum: 9\r\n\r\n"
    async with scripted([CHUNKED_HEAD, *split_every_byte(body)], keep_alive=True) as server:
        adapter = toy(server.port)
        for _ in range(2):
            assert text_of(await call(adapter)) == "12345678"
        await adapter.aclose()
    assert server.connections == 1 and len(server.requests) == 2


async def test_chunk_extensions_and_several_trailers_are_skipped() -> None:
    body = (
        b'9;name=value;quoted="a;b"\r\ndata: hel\r\n'
        b"f;flag\r\nlo\n\ndata: END\n\n\r\n"
        b"0;last=1\r\nx-one: 1\r\nx-two: 2\r\n\r\n"
    )
    async with scripted([CHUNKED_HEAD + body], keep_alive=True) as server:
        adapter = toy(server.port)
        for _ in range(2):
            assert text_of(await call(adapter)) == "hello"
        await adapter.aclose()
    assert server.connections == 1  # the trailers ended the body cleanly


async def test_gzip_content_is_decoded() -> None:
    packed = gzip.compress(SSE)
    reply = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (
        len(packed),
        packed,
    )
    async with scripted([reply]) as server:
        assert text_of(await once(server.port)) == "hello"


async def test_a_pooled_connection_the_server_closed_is_replaced() -> None:
    async with scripted([OK_SSE]) as server:  # closes each connection after its reply
        adapter = toy(server.port)
        assert text_of(await call(adapter)) == "hello"
        await asyncio.sleep(0.05)
        assert text_of(await call(adapter)) == "hello"
        await adapter.aclose()
    assert server.connections == 2 and len(server.requests) == 2


async def test_an_error_body_is_read_bounded_and_its_connection_not_reused() -> None:
    """A 500 with a body past MAX_ERROR_BODY: the call ends after MAX_ERROR_BODY bytes, and the
    connection, its body not read to the end, is closed rather than pooled."""
    big = b"x" * (4 * MAX_ERROR_BODY)
    error = b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big)
    async with scripted([error], [OK_SSE], keep_alive=True) as server:
        adapter = toy(server.port)
        failed = error_of(await call(adapter))
        assert failed.http_status == 500 and failed.error_message.startswith("toy HTTP 500: xxx")
        assert text_of(await call(adapter)) == "hello"
        await adapter.aclose()
    assert server.connections == 2


async def test_many_concurrent_calls_to_one_host_are_not_queued() -> None:
    """No cap on connections per host: with 24 calls waiting for their answers, all 24
    requests reached the provider (none queues behind a pool limit of 16, say)."""
    async with scripted([Act.HOLD]) as server:
        adapter = toy(server.port)
        streams = [adapter.call(REQUEST, SETTINGS) for _ in range(24)]
        async with asyncio.timeout(NO_HANG_S):
            while len(server.requests) < 24:
                await asyncio.sleep(0.02)
        for stream in streams:
            await stream.aclose()
        await adapter.aclose()
    assert server.connections == 24


async def test_cookies_a_provider_sets_are_not_sent_back() -> None:
    reply = b"HTTP/1.1 200 OK\r\nSet-Cookie: track=1; Path=/\r\nContent-Length: %d\r\n\r\n%s" % (
        len(SSE),
        SSE,
    )
    async with scripted([reply], keep_alive=True) as server:
        adapter = toy(server.port, host="localhost")  # a cookie jar refuses IP addresses
        for _ in range(2):
            assert text_of(await call(adapter)) == "hello"
        await adapter.aclose()
    assert len(server.requests) == 2
    assert all(b"cookie" not in request.lower() for request in server.requests)


# -- broken heads and bodies -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", "Got more than 8190 bytes"),
        (b"HTTP/1.1 200 OK\r\n" + b"x-a: 1\r\n" * 129 + b"\r\n", "Too many headers received"),
        (b"SPDY/9 200 OK\r\n\r\n", "Bad status line"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "Bad status line: Invalid status code"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "Invalid header token"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", "Invalid character in Content-Length"),
        (CHUNKED_HEAD + b"zz\r\n", "Invalid character in chunk size"),
        (CHUNKED_HEAD + b"1" * 2000 + b"\r\n", "Chunk size overflow"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx", "brotli (br)"),
        # non-ASCII digits: "²".isdigit() is true, and int("²") raises
        (b"HTTP/1.1 \xb200 OK\r\nContent-Length: 0\r\n\r\n", "Invalid status code"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nxx", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\nxx", "Content-Length"),
    ],
)
async def test_hostile_or_broken_responses_are_clear_errors(reply: bytes, message: str) -> None:
    async with scripted([reply, Act.HOLD]) as server:
        error = error_of(await once(server.port))
    assert error.error_message.startswith("toy: could not connect: connection lost before the ")
    assert message in error.error_message and "\n" not in error.error_message
    assert len(error.error_message) < 600


@pytest.mark.parametrize("size", [b"-1", b"+5", b"0x5", b"5_0", b"", b" "])
async def test_a_chunk_size_that_is_not_hex_digits_is_refused(size: bytes) -> None:
    """`int(x, 16)` also takes signs, a 0x prefix and underscores: "5_0" would read 80 bytes."""
    reply = CHUNKED_HEAD + size + b"\r\n" + b"x" * 80 + b"\r\n0\r\n\r\n"
    async with scripted([reply, Act.HOLD]) as server:
        error = error_of(await once(server.port))
    assert "Invalid character in chunk size" in error.error_message


@pytest.mark.parametrize(
    ("sent", "message"),
    [
        (b"HTTP/1.1 20", "closed the connection inside the response head"),
        (b"HTTP/1.1 200 OK\r\nContent-Type: text/ev", "inside the response head"),
        (CHUNKED_HEAD, "Not enough data to satisfy transfer length header"),
        (CHUNKED_HEAD + b"1", "Not enough data to satisfy transfer length header"),
        (CHUNKED_HEAD + b"9\r\ndata: a", "Not enough data to satisfy transfer length header"),
        (CHUNKED_HEAD + b"9\r\ndata: a\n\n", "Not enough data to satisfy transfer length"),
        (CHUNKED_HEAD + b"9\r\ndata: a\n\n\r\n", "Not enough data to satisfy transfer length"),
        (CHUNKED_HEAD + b"0\r\nx-trailer: 1", "Not enough data to satisfy transfer length"),
        (HEAD_200_LENGTH + b"only ten b", "received 10 of 20 bytes"),
    ],
)
async def test_a_close_mid_response_is_a_clear_error_at_once(sent: bytes, message: str) -> None:
    async with scripted([sent, 0.05]) as server:
        error = error_of(await once(server.port))
    assert message in error.error_message
    if sent.startswith(CHUNKED_HEAD) or sent.startswith(HEAD_200_LENGTH):
        assert error.error_message.startswith("toy: connection lost mid-stream: ")
    else:
        assert error.error_message.startswith("toy: could not connect: ") and error.transient


@pytest.mark.parametrize("sent", [CHUNKED_HEAD + b"9\r\ndata: a\n\n\r\n5\r\nab", HEAD_200_LENGTH])
async def test_a_reset_mid_body_is_a_connection_reset(sent: bytes) -> None:
    """ECONNRESET while the body streams: named a reset, not an undecodable stream."""
    async with scripted([sent, 0.05, Act.RESET]) as server:
        error = error_of(await once(server.port))
    assert error.error_message.startswith(
        "toy: the provider connection was reset mid-stream (ECONNRESET after "
    )


@pytest.mark.parametrize("reset", [False, True])
async def test_a_stream_cut_short_ends_the_model_call_with_a_clear_error(reset: bool) -> None:
    cut: list[Step] = [CHUNKED_HEAD + b"b\r\ndata: hel\n\n\r\n", 0.05]
    async with scripted([*cut, Act.RESET] if reset else cut) as server:
        events = await once(server.port)
    assert isinstance(events[0], StartEvent)
    end = error_of(events)
    assert end.message.text == "hel"
    said = "the provider connection was reset" if reset else "connection lost mid-stream"
    assert end.error_message.startswith(f"toy: {said}")


async def test_a_fresh_connection_closed_before_any_response_is_an_error() -> None:
    async with scripted([]) as server:  # reads the request, closes without a word
        error = error_of(await once(server.port))
    assert error.transient  # nothing was output: the retry policy may try again
    assert error.error_message == (
        "toy: could not connect: connection lost before the response: "
        "the server closed the connection"
    )
    assert server.connections == 1  # the client itself does not resend a POST


# -- interim (1xx) responses -------------------------------------------------------------------


async def test_interim_responses_before_the_final_one_are_skipped() -> None:
    reply = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </app.js>; rel=preload\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nX-Final: yes\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
    )
    async with scripted([reply], keep_alive=True) as server:
        adapter = toy(server.port)
        for _ in range(2):
            assert text_of(await call(adapter)) == "hello"
        response = await adapter.upstream.request(
            "POST", f"http://127.0.0.1:{server.port}/", [], b""
        )
        assert response.status == 200 and response.fields.get("x-final") == "yes"
        assert "link" not in response.fields
        await response.aclose()
        await adapter.aclose()
    assert server.connections == 1


async def test_a_close_after_an_interim_response_is_an_error_not_resent() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
    interim_then_close: list[Step] = [b"HTTP/1.1 100 Continue\r\n\r\n", 0.05, Act.CLOSE]
    async with scripted([ok], interim_then_close, keep_alive=True) as server:
        adapter = toy(server.port)
        assert text_of(await call(adapter)) == "hello"
        error = error_of(await call(adapter))
        await adapter.aclose()
    assert "connection lost before the response" in error.error_message
    assert len(server.requests) == 2 and server.connections == 1


async def test_101_switching_protocols_is_refused() -> None:
    """We never ask for an upgrade: what follows a 101 is not HTTP, so do not read it as SSE."""
    reply = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\ndata: END\n\n"
    async with scripted([reply, Act.HOLD]) as server:
        error = error_of(await once(server.port))
    assert error.error_message == (
        "toy: could not connect: unexpected 101 Switching Protocols: "
        "a provider call asks for no upgrade"
    )


# -- redirects (3xx) ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_an_error_naming_status_and_location(status: int) -> None:
    """Not followed: a POST of the prompt, with the key, would go wherever the provider's
    answer points. The error says where, so the operator can fix `base_url`."""
    async with scripted([OK_SSE]) as target:
        location = f"http://127.0.0.1:{target.port}/moved/v1"
        reply = (
            f"HTTP/1.1 {status} Moved\r\nLocation: {location}\r\n"
            f"Content-Type: text/html\r\nContent-Length: 13\r\n\r\n<p>moved</p>\n"
        ).encode()
        async with scripted([reply]) as server:
            events = await once(server.port)
        assert target.connections == 0
    assert len(events) == 1
    error = error_of(events)
    assert error.http_status == status and not error.transient
    assert error.error_message == (
        f"toy HTTP {status}: redirected to {location}; redirects are not followed, "
        f"set the provider's base_url to the final address"
    )


async def test_a_redirect_without_location_still_names_the_status() -> None:
    reply = b"HTTP/1.1 300 Multiple Choices\r\nContent-Length: 0\r\n\r\n"
    async with scripted([reply]) as server:
        events = await once(server.port)
    assert len(events) == 1
    assert error_of(events).error_message.startswith("toy HTTP 300: redirected (no location)")


async def test_a_2xx_stream_still_streams() -> None:
    """The redirect rule takes nothing from the success path: a 200 (and a 203) stream."""
    for status in (b"200 OK", b"203 Non-Authoritative Information"):
        reply = b"HTTP/1.1 " + status + b"\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
        async with scripted([reply]) as server:
            assert text_of(await once(server.port)) == "hello"


# -- timeouts, refusals, bad input -------------------------------------------------------------


async def test_timeouts_and_refused_connections() -> None:
    async with scripted([Act.HOLD], [HEAD_200_LENGTH + b"ab", Act.HOLD]) as server:
        silent = error_of(await once(server.port, read=0.2))
        assert silent.transient  # connected, then silence: nothing was output
        assert silent.error_message == "toy: connected, but no response came within 0.2 s"
        stalled = error_of(await once(server.port, read=0.2))
        assert stalled.error_message == "toy: no data for 0.2 s; gave up"
    refused = error_of(await once(9))  # the discard port: nothing listens
    assert refused.transient
    assert refused.error_message.startswith("toy: could not connect: cannot connect to 127.0.0.1:9")
    adapter = toy(9)
    with pytest.raises(ConnectFailed, match="not an http"):
        await adapter.upstream.request("POST", "ftp://example.com/", [], b"")
    await adapter.aclose()


async def test_header_values_cannot_smuggle_lines() -> None:
    async with scripted([OK_SSE]) as server:
        adapter = toy(server.port)
        url = f"http://127.0.0.1:{server.port}/"
        with pytest.raises(ProtocolError, match="not sent: Forbidden control character"):
            await adapter.upstream.request("POST", url, [("x", "a\r\nevil: 1")], b"")
        await adapter.aclose()
    assert server.requests == []
