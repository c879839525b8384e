"""The lean HTTP/1.1 client (llm/wire.py) against raw loopback servers that send exact bytes."""

from __future__ import annotations

import asyncio
import gzip
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from cursor_byok.llm.http import HttpAdapter
from cursor_byok.llm.settings import ProviderSettings
from cursor_byok.llm.wire import (
    WireClient,
    WireConnectError,
    WireProtocolError,
    WireResponse,
    WireTimeout,
    proxy_configured,
)
from tests.app.test_launch import make_ca_and_leaf
from tests.llm.test_http import ToyAdapter

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Server:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        body = await reader.readexactly(length)
        self.requests.append(head + body)
        return head + body


@asynccontextmanager
async def serving(
    handler: Handler, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[Server]:
    server = Server(handler)
    listener = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=ssl_context)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()


def client(**kw: float) -> WireClient:
    return WireClient(connect_timeout=kw.get("connect", 2.0), read_timeout=kw.get("read", 2.0))


async def body_of(response: WireResponse) -> bytes:
    out = b""
    async for piece in response.chunks():
        out += piece
    await response.aclose()
    return out


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def test_chunked_length_and_close_bodies() -> None:
    replies = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(b"data: a\n\n", b"b"),
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while replies:
            await server.read_request(reader)
            reply = replies.pop(0)
            writer.write(reply)
            await writer.drain()
            if b"close" in reply:
                return

    async with serving(handler) as server:
        c = client()
        url = f"http://127.0.0.1:{server.port}/v1/x?q=1"
        first = await c.request("POST", url, [("content-type", "application/json")], b"{}")
        assert first.status == 200 and await body_of(first) == b"data: a\n\nb"
        assert await body_of(await c.request("POST", url, [], b"")) == b"hello"
        assert await body_of(await c.request("POST", url, [], b"")) == b"until the end"
        assert server.connections == 1  # the first two bodies ended cleanly: one connection
        sent = server.requests[0]
        assert sent.startswith(b"POST /v1/x?q=1 HTTP/1.1\r\n")
        assert f"host: 127.0.0.1:{server.port}".encode() in sent
        assert b"content-length: 2\r\n" in sent and sent.endswith(b"\r\n\r\n{}")
        await c.aclose()


async def test_chunk_extensions_trailers_and_interim_responses() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(
            b"HTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nX-A: 1\r\nx-a: 2\r\n\r\n"
            b"3;ext=1\r\nabc\r\n0\r\nx-trailer: t\r\n\r\n"
        )
        await writer.drain()

    async with serving(handler) as server:
        c = client()
        r = await c.request("POST", f"http://127.0.0.1:{server.port}/", [], b"")
        assert r.status == 200 and r.header("x-a") == "1, 2"
        assert await body_of(r) == b"abc"
        await c.aclose()


async def test_gzip_content_is_decoded() -> None:
    packed = gzip.compress(b"data: squeezed\n\n")

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
            % (len(packed), packed)
        )
        await writer.drain()

    async with serving(handler) as server:
        c = client()
        r = await c.request("POST", f"http://127.0.0.1:{server.port}/", [], b"")
        assert await body_of(r) == b"data: squeezed\n\n"
        await c.aclose()


async def test_a_pooled_connection_the_server_closed_is_replaced_once() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        # then the server drops the idle keep-alive connection

    async with serving(handler) as server:
        c = client()
        url = f"http://127.0.0.1:{server.port}/"
        assert await body_of(await c.request("POST", url, [], b"1")) == b"ok"
        await asyncio.sleep(0.05)
        assert await body_of(await c.request("POST", url, [], b"2")) == b"ok"
        assert server.connections == 2 and len(server.requests) == 2
        await c.aclose()


async def test_a_fresh_connection_closed_before_any_response_is_an_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)  # and closes without a word

    async with serving(handler) as server:
        c = client()
        with pytest.raises(WireProtocolError, match="connection lost before the response"):
            await c.request("POST", f"http://127.0.0.1:{server.port}/", [], b"x")
        assert server.connections == 1  # not retried: the request may have been processed
        await c.aclose()


async def test_a_body_not_read_to_its_end_does_not_go_back_to_the_pool() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabcdef")
            await writer.drain()

    async with serving(handler) as server:
        c = client()
        url = f"http://127.0.0.1:{server.port}/"
        r = await c.request("POST", url, [], b"")
        await r.aclose()  # body never read
        assert await body_of(await c.request("POST", url, [], b"")) == b"abcdef"
        assert server.connections == 2
        await c.aclose()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", "response head longer"),
        (b"SPDY/9 200 OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", "bad content-length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 2000 + b"\r\n",
            "chunk size line longer",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "closed inside a chunk"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", "closed before the body's end"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx", "br"),
    ],
)
async def test_hostile_or_broken_responses_are_clear_errors(reply: bytes, message: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(reply)
        await writer.drain()

    async with serving(handler) as server:
        c = client()
        with pytest.raises(WireProtocolError, match=message):
            r = await c.request("POST", f"http://127.0.0.1:{server.port}/", [], b"")
            await body_of(r)
        await c.aclose()


async def test_timeouts_and_refused_connections() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        if n == 2:  # the second connection gets a head, then nothing
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
            await writer.drain()
        await asyncio.sleep(5)

    async with serving(silent) as server:
        c = client(read=0.2)
        url = f"http://127.0.0.1:{server.port}/"
        with pytest.raises(WireTimeout, match=r"connected, but no response came within 0\.2 s"):
            await c.request("POST", url, [], b"")
        r = await c.request("POST", url, [], b"")
        with pytest.raises(WireTimeout, match=r"no data for 0\.2 s"):
            await body_of(r)
        await r.aclose()
        await c.aclose()
    with pytest.raises(WireConnectError, match="cannot connect"):
        await client().request("POST", "http://127.0.0.1:9/", [], b"")
    with pytest.raises(WireConnectError, match="not an http"):
        await client().request("POST", "ftp://example.com/", [], b"")


async def test_header_values_cannot_smuggle_lines() -> None:
    with pytest.raises(WireProtocolError, match="line break"):
        await client().request("POST", "http://127.0.0.1:9/", [("x", "a\r\nevil: 1")], b"")


async def test_https_with_the_ca_from_ssl_cert_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, cert, key = make_ca_and_leaf(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret")
        await writer.drain()

    async with serving(handler, context) as server:
        url = f"https://127.0.0.1:{server.port}/"
        untrusting = client()
        with pytest.raises(WireConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusting.request("POST", url, [], b"")
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        trusting = client()
        assert await body_of(await trusting.request("POST", url, [], b"")) == b"secret"
        await trusting.aclose()


def test_httpx_is_used_only_with_a_proxy_or_an_injected_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("https_proxy", "http_proxy", "all_proxy", "HTTPS_PROXY", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    settings = ProviderSettings(name="toy", api="faux", base_url="http://x", api_key="k")
    assert not proxy_configured()
    assert ToyAdapter(settings).via_httpx is False
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert proxy_configured()
    assert ToyAdapter(settings).via_httpx is True
    assert isinstance(ToyAdapter(settings), HttpAdapter)
