"""TLS failures and proxies for provider calls (an adapter over llm/upstream.py), against
loopback servers with certificates made by the openssl CLI.

Proxies: a real proxy on loopback; the call must go through it (plain HTTP in absolute form,
HTTPS through a CONNECT tunnel that never sees the key), `NO_PROXY` must still go direct,
`ALL_PROXY` counts when no scheme's own variable is set, and a SOCKS proxy is a clear error."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cursor_byok.llm.events import ErrorEvent, ResponseEvent
from cursor_byok.llm.upstream import PROXY_VARIABLES
from tests.llm.test_upstream_http import error_of, once, text_of
from tests.support.raw_server import Act, issued_cert, read_request, scripted, self_signed_cert

SSE = b"data: hel\n\ndata: lo\n\ndata: END\n\n"
OK_SSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
KEY_BYTES = b"sk-test-SECRET-0123456789"


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*PROXY_VARIABLES, "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


async def https_once(port: int, host: str = "127.0.0.1", **kw: float) -> list[ResponseEvent]:
    return await once(port, scheme="https", host=host, **kw)


# -- TLS ---------------------------------------------------------------------------------------


async def test_a_self_signed_certificate_is_refused(tmp_path: Path) -> None:
    certs = self_signed_cert(tmp_path)
    async with scripted([OK_SSE], tls=certs.server_context()) as server:
        events = await https_once(server.port)
    assert len(events) == 1
    error = error_of(events)
    assert error.transient
    assert error.error_message.startswith(
        f"toy: could not connect: cannot connect to 127.0.0.1:{server.port}: "
        "[SSL: CERTIFICATE_VERIFY_FAILED]"
    )
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
        error = error_of(await https_once(server.port, host))
    assert "CERTIFICATE_VERIFY_FAILED" in error.error_message and message in error.error_message
    assert server.requests == []


async def test_the_ca_from_ssl_cert_file_is_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = issued_cert(tmp_path, "IP:127.0.0.1")
    async with scripted([OK_SSE], tls=certs.server_context()) as server:
        assert "CERTIFICATE_VERIFY_FAILED" in error_of(await https_once(server.port)).error_message
        monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
        assert text_of(await https_once(server.port)) == "hello"


async def test_a_plain_http_server_at_an_https_url() -> None:
    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)  # the ClientHello, which it cannot read as HTTP
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(plain, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        error = error_of(await https_once(port))
    finally:
        listener.close()
    assert error.transient
    assert error.error_message.startswith(
        f"toy: could not connect: cannot connect to 127.0.0.1:{port}"
    )
    assert "SSL" in error.error_message


async def test_a_handshake_never_answered_is_a_connect_timeout() -> None:
    async with scripted([OK_SSE]) as server:  # plain TCP, waits for a request that never comes
        error = error_of(await https_once(server.port, connect=0.3))
    assert error.transient
    assert error.error_message == (
        f"toy: timed out connecting: no connection to 127.0.0.1:{server.port} within 0.3 s"
    )


@pytest.fixture
def trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    certs = issued_cert(tmp_path, "IP:127.0.0.1,DNS:localhost")
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
    return certs.server_context()


async def test_a_broken_tls_record_before_the_response_ends_the_call(
    trusted: ssl.SSLContext,
) -> None:
    """After the handshake, a record that does not decrypt: one error event at once (a bare
    ssl.SSLError once ended the stream's reading task and left the consumer waiting)."""
    async with scripted([Act.BAD_TLS_RECORD, Act.HOLD], tls=trusted) as server:
        events = await https_once(server.port)
    assert len(events) == 1
    message = error_of(events).error_message
    assert message.startswith("toy: could not connect: connection lost before the response: ")
    assert "DECRYPTION_FAILED_OR_BAD_RECORD_MAC" in message


async def test_a_broken_tls_record_mid_body_ends_the_call(trusted: ssl.SSLContext) -> None:
    script = [CHUNKED + b"b\r\ndata: hel\n\n\r\n", 0.05, Act.BAD_TLS_RECORD, Act.HOLD]
    async with scripted(script, tls=trusted) as server:
        end = error_of(await https_once(server.port))
    assert end.message.text == "hel"
    assert end.error_message.startswith("toy: connection lost mid-stream: connection lost mid-body")
    assert "DECRYPTION_FAILED_OR_BAD_RECORD_MAC" in end.error_message


# -- proxies -----------------------------------------------------------------------------------


@dataclass
class Proxy:
    """A forward proxy: absolute-form requests are answered here (as if relayed), CONNECT
    opens a tunnel to the named port on loopback."""

    port: int = 0
    seen: list[bytes] = field(default_factory=list)  # every byte the proxy read in the clear
    refuse: bool = False  # answer every request with a 407

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await read_request(reader)
            self.seen.append(request)
            line = request.split(b"\r\n", 1)[0]
            if self.refuse:
                writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
                await writer.drain()
                return
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


async def named_call(base_url: str) -> list[ResponseEvent]:
    """A call to a provider named by `base_url` (which need not resolve: a proxy answers)."""
    return await once(0, base_url=base_url)


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"])
async def test_an_http_provider_call_goes_through_the_proxy(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    async with proxy() as p:
        monkeypatch.setenv(variable, f"http://127.0.0.1:{p.port}")
        # a name that does not resolve: only the proxy can answer for it
        events = await named_call("http://provider.invalid:8080")
    assert text_of(events) == "hello"
    assert p.seen[0].startswith(b"POST http://provider.invalid:8080/toy HTTP/1.1\r\n")


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "ALL_PROXY"])
async def test_an_https_provider_call_tunnels_through_the_proxy(
    monkeypatch: pytest.MonkeyPatch, trusted: ssl.SSLContext, variable: str
) -> None:
    async with proxy() as p, scripted([OK_SSE], tls=trusted) as provider:
        monkeypatch.setenv(variable, f"http://127.0.0.1:{p.port}")
        events = await named_call(f"https://localhost:{provider.port}")
    assert text_of(events) == "hello"
    assert p.seen[0].startswith(f"CONNECT localhost:{provider.port} HTTP/1.1".encode())
    assert provider.requests[0].startswith(b"POST /toy HTTP/1.1\r\n")
    assert KEY_BYTES in provider.requests[0]
    assert all(KEY_BYTES not in seen for seen in p.seen)  # the key only inside TLS


async def test_a_proxy_refusing_the_tunnel_is_a_connect_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with proxy() as p:
        p.refuse = True
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{p.port}")
        error = error_of(await named_call("https://provider.invalid"))
    assert error.transient and len(p.seen) == 1
    assert error.error_message == (
        "toy: could not connect: the proxy refused the tunnel: 407 Proxy Authentication Required"
    )


async def test_no_proxy_sends_the_call_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    async with proxy() as p, scripted([OK_SSE]) as provider:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{p.port}")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        events = await once(provider.port)
    assert text_of(events) == "hello"
    assert p.seen == [] and len(provider.requests) == 1


async def test_without_a_proxy_the_call_goes_direct() -> None:
    async with scripted([OK_SSE]) as provider:
        assert text_of(await once(provider.port)) == "hello"
    assert len(provider.requests) == 1


async def test_a_socks_proxy_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp speaks no SOCKS: say so, rather than ignore the variable and go direct."""
    monkeypatch.setenv("ALL_PROXY", "socks5://user:pw@127.0.0.1:1080")
    async with scripted([OK_SSE]) as provider:
        events = await once(provider.port)
    assert provider.requests == []  # not sent direct either
    error = events[-1]
    assert isinstance(error, ErrorEvent) and "pw" not in error.error_message
    assert error.error_message == (
        "toy: could not connect: the proxy for http:// calls is a socks5:// proxy; provider "
        "calls go only through http:// or https:// proxies"
    )
