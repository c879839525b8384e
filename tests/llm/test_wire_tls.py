"""TLS failures and proxies for provider calls (llm/wire.py, and httpx where http.py picks it),
against loopback servers with certificates made by the openssl CLI.

Proxies: wire.py speaks no proxy protocol, so `HttpAdapter` sends every call through httpx
when a proxy variable is set; these tests put a real proxy on loopback and check that the
call goes through it (plain HTTP in absolute form, HTTPS through a CONNECT tunnel), and that
`NO_PROXY` still goes direct."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cursor_byok.llm.events import DoneEvent, ErrorEvent
from cursor_byok.llm.settings import ProviderSettings
from cursor_byok.llm.wire import (
    PROXY_VARIABLES,
    WireClient,
    WireConnectError,
    WireConnectTimeout,
    WireProtocolError,
)
from tests.llm.test_http import KEY, REQUEST, SETTINGS, ToyAdapter, collect
from tests.support.raw_server import Act, issued_cert, read_request, scripted, self_signed_cert

NO_HANG_S = 10.0
SSE = b"data: hel\n\ndata: lo\n\ndata: END\n\n"
OK_SSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*PROXY_VARIABLES, "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def wire(connect: float = 5.0) -> WireClient:
    return WireClient(connect_timeout=connect, read_timeout=60.0)


async def fetch(client: WireClient, url: str) -> bytes:
    async with asyncio.timeout(NO_HANG_S):
        response = await client.request("POST", url, [("authorization", KEY)], b"{}")
        body = b""
        async for piece in response.chunks():
            body += piece
        await response.aclose()
    return body


async def toy_events(base_url: str) -> tuple[ToyAdapter, list[object]]:
    settings = ProviderSettings(
        name="toy", api="faux", base_url=base_url, api_key=KEY, read_timeout_s=60.0
    )
    adapter = ToyAdapter(settings)
    async with asyncio.timeout(NO_HANG_S):
        events = await collect(adapter.call(REQUEST, SETTINGS))
    await adapter.aclose()
    return adapter, list(events)


# -- TLS ---------------------------------------------------------------------------------------


async def test_a_self_signed_certificate_is_refused(tmp_path: Path) -> None:
    certs = self_signed_cert(tmp_path)
    async with scripted([OK_SSE], tls=certs.server_context()) as server:
        url = f"https://127.0.0.1:{server.port}"
        with pytest.raises(WireConnectError, match=r"CERTIFICATE_VERIFY_FAILED.*self.signed"):
            await fetch(wire(), url + "/v1")
        adapter, events = await toy_events(url)
    assert not adapter.via_httpx and len(events) == 1
    error = events[0]
    assert isinstance(error, ErrorEvent) and error.transient
    assert error.error_message.startswith("toy: could not connect: cannot connect to 127.0.0.1:")
    assert "self-signed certificate" in error.error_message
    assert server.requests == []  # nothing was sent, the key included


@pytest.mark.parametrize(
    ("host", "message"), [("127.0.0.1", "IP address mismatch"), ("localhost", "Hostname mismatch")]
)
async def test_a_certificate_for_another_host_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str, message: str
) -> None:
    certs = issued_cert(tmp_path, "DNS:api.other.example")
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))  # the CA is trusted, the name is wrong
    async with scripted([OK_SSE], tls=certs.server_context()) as server:
        with pytest.raises(WireConnectError, match=f"CERTIFICATE_VERIFY_FAILED.*{message}"):
            await fetch(wire(), f"https://{host}:{server.port}/v1")
    assert server.requests == []


async def test_a_plain_http_server_at_an_https_url(tmp_path: Path) -> None:
    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)  # the ClientHello, which it cannot read as HTTP
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(plain, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        with pytest.raises(WireConnectError, match=f"cannot connect to 127.0.0.1:{port}: .*SSL"):
            await fetch(wire(), f"https://127.0.0.1:{port}/v1")
    finally:
        listener.close()


async def test_a_handshake_never_answered_is_a_connect_timeout() -> None:
    async with scripted([OK_SSE]) as server:  # plain TCP, waits for a request that never comes
        with pytest.raises(WireConnectTimeout, match=r"no connection to .* within 0\.3 s"):
            await fetch(wire(connect=0.3), f"https://127.0.0.1:{server.port}/v1")


@pytest.fixture
def trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    certs = issued_cert(tmp_path, "IP:127.0.0.1,DNS:localhost")
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
    return certs.server_context()


async def test_a_broken_tls_record_before_the_response_is_a_wire_error(
    trusted: ssl.SSLContext,
) -> None:
    """After the handshake, a record that does not decrypt: a clear `WireError`, and the model
    call ends with an error event (a bare ssl.SSLError ended the stream's reading task and
    left the consumer waiting forever)."""
    async with scripted([Act.BAD_TLS_RECORD, Act.HOLD], tls=trusted) as server:
        url = f"https://127.0.0.1:{server.port}"
        with pytest.raises(WireProtocolError, match=r"connection lost before the response.*SSL"):
            await fetch(wire(), url + "/v1")
        _, events = await toy_events(url)
    assert len(events) == 1 and isinstance(events[0], ErrorEvent)
    assert "connection lost before the response" in events[0].error_message
    assert "DECRYPTION_FAILED_OR_BAD_RECORD_MAC" in events[0].error_message


async def test_a_broken_tls_record_mid_body_is_a_wire_error(trusted: ssl.SSLContext) -> None:
    script = [CHUNKED + b"b\r\ndata: hel\n\n\r\n", 0.05, Act.BAD_TLS_RECORD, Act.HOLD]
    async with scripted(script, tls=trusted) as server:
        url = f"https://127.0.0.1:{server.port}"
        with pytest.raises(WireProtocolError, match=r"connection lost mid-body.*SSL"):
            await fetch(wire(), url + "/v1")
        _, events = await toy_events(url)
    end = events[-1]
    assert isinstance(end, ErrorEvent) and end.message.text == "hel"
    assert end.error_message.startswith("toy: connection lost mid-stream: connection lost mid-body")


# -- proxies -----------------------------------------------------------------------------------


@dataclass
class Proxy:
    """A forward proxy: absolute-form requests are answered here (as if relayed), CONNECT
    opens a tunnel to the named port on loopback."""

    port: int = 0
    seen: list[bytes] = field(default_factory=list)  # every byte the proxy read in the clear

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await read_request(reader)
            self.seen.append(request)
            line = request.split(b"\r\n", 1)[0]
            if not line.startswith(b"CONNECT "):
                writer.write(OK_SSE)
                await writer.drain()
                return
            port = int(line.split(b" ")[1].rsplit(b":", 1)[1])
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while data := await source.read(65536):
        sink.write(data)
        await sink.drain()
    sink.close()


@contextlib.asynccontextmanager
async def proxy() -> AsyncIterator[Proxy]:
    p = Proxy()
    listener = await asyncio.start_server(p.serve, "127.0.0.1", 0)
    p.port = listener.sockets[0].getsockname()[1]
    try:
        yield p
    finally:
        listener.close()


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
async def test_an_http_provider_call_goes_through_the_proxy(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    async with proxy() as p:
        monkeypatch.setenv(variable, f"http://127.0.0.1:{p.port}")
        # a name that does not resolve: only the proxy can answer for it
        adapter, events = await toy_events("http://provider.invalid:8080")
    assert adapter.via_httpx
    assert isinstance(events[-1], DoneEvent) and events[-1].message.text == "hello"
    assert p.seen[0].startswith(b"POST http://provider.invalid:8080/toy HTTP/1.1\r\n")


async def test_an_https_provider_call_tunnels_through_the_proxy(
    monkeypatch: pytest.MonkeyPatch, trusted: ssl.SSLContext
) -> None:
    async with proxy() as p, scripted([OK_SSE], tls=trusted) as provider:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{p.port}")
        adapter, events = await toy_events(f"https://localhost:{provider.port}")
    assert adapter.via_httpx
    assert isinstance(events[-1], DoneEvent) and events[-1].message.text == "hello"
    assert p.seen[0].startswith(f"CONNECT localhost:{provider.port} HTTP/1.1".encode())
    assert provider.requests[0].startswith(b"POST /toy HTTP/1.1\r\n")
    assert KEY.encode() in provider.requests[0]
    assert all(KEY.encode() not in seen for seen in p.seen)  # the key only inside TLS


async def test_no_proxy_sends_the_call_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    async with proxy() as p, scripted([OK_SSE]) as provider:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{p.port}")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        _, events = await toy_events(f"http://127.0.0.1:{provider.port}")
    assert isinstance(events[-1], DoneEvent) and events[-1].message.text == "hello"
    assert p.seen == [] and len(provider.requests) == 1


async def test_without_a_proxy_the_call_uses_wire() -> None:
    async with scripted([OK_SSE]) as provider:
        adapter, events = await toy_events(f"http://127.0.0.1:{provider.port}")
    assert not adapter.via_httpx and adapter._wire is not None and adapter._client is None
    assert isinstance(events[-1], DoneEvent)
