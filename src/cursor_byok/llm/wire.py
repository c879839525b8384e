"""A lean HTTP/1.1 client for provider calls: one POST, a streamed body, pooled connections.

Why not httpx here: per model call httpx's client layers (request building, URL merging,
cookies, auth and redirect hooks), httpcore's per-request sniffio/anyio machinery and h11's
event objects cost about 1 ms of CPU on the event loop's thread (py-spy, see
docs/benchmarks-server.md), on the path to every first token. A provider call needs none of
that: a request whose bytes are already made, and a body read as it comes.

What it does: `http` and `https` (TLS with certifi's CA bundle, or `SSL_CERT_FILE` /
`SSL_CERT_DIR`); the
request written in one `write`; response bodies framed by `Transfer-Encoding: chunked`,
`Content-Length` or the end of the connection; `gzip`/`deflate` content decoded; keep-alive
connections pooled per origin and reused only after a body was read to its end; a pooled
connection the server closed meanwhile is retried once on a fresh one when the request
cannot have reached it; hostile sizes (status line and headers over 64 KiB, a chunk size
line over 1 KiB) are errors. Interim responses (100, 103) are skipped, a 101 is refused, a 3xx
is returned like any final status (http.py refuses it: redirects are not followed). Every
failure, a reset or a TLS error included, is a `WireError`. Timeouts: connect (including TLS)
and each read. tests/llm/test_wire_http.py and test_wire_tls.py hold these cases.

What it leaves to httpx: proxies. `HttpAdapter` uses httpx whenever a proxy variable is set.
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")

MAX_HEAD_BYTES = 64 * 1024
MAX_CHUNK_LINE = 1024
READ_SIZE = 64 * 1024
MAX_IDLE_PER_ORIGIN = 16
PROXY_VARIABLES = ("https_proxy", "http_proxy", "all_proxy")
# RFC 9112 chunk-size: hex digits only (int(x, 16) also takes "-1", "0x5" and "5_0")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")


class WireError(Exception):
    """The HTTP exchange failed; `str()` says how, without any header value."""


class WireConnectError(WireError):
    """No connection (refused, unreachable, DNS, TLS handshake): nothing was sent."""


class WireTimeout(WireError):
    """Connecting or a read took longer than allowed."""


class WireConnectTimeout(WireTimeout):
    """No connection within the connect timeout: nothing was sent."""


class WireProtocolError(WireError):
    """The server broke HTTP/1.1 (bad status line, headers, framing) or closed mid-body."""


def proxy_configured(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return any(env.get(name) or env.get(name.upper()) for name in PROXY_VARIABLES)


def _tls_context() -> ssl.SSLContext:
    """Verify providers against `SSL_CERT_FILE` / `SSL_CERT_DIR` when set (as httpx does),
    else certifi's bundle."""
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if not cafile and not capath:
        try:
            import certifi

            cafile = certifi.where()
        except ImportError:  # pragma: no cover - httpx depends on certifi
            pass
    context = ssl.create_default_context(cafile=cafile, capath=capath)
    context.set_alpn_protocols(["http/1.1"])
    return context


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int

    @property
    def authority(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


class _Connection:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False

    @property
    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


@dataclass
class WireResponse:
    """A response whose body is read with `chunks()`; `aclose()` returns or drops the
    connection (returned only after the body was read to its end)."""

    status: int
    reason: str
    headers: list[tuple[str, str]]  # names lower-cased, in order
    _client: WireClient = field(repr=False)
    _origin: _Origin = field(repr=False)
    _conn: _Connection | None = field(repr=False)
    _framing: str = field(repr=False)  # "chunked" | "length" | "close" | "none"
    _left: int = field(default=0, repr=False)
    _keep_alive: bool = field(default=True, repr=False)
    _complete: bool = field(default=False, repr=False)

    @property
    def fields(self) -> dict[str, str]:
        """Header values by lower-case name (repeated headers joined with ", ")."""
        values: dict[str, str] = {}
        for name, value in self.headers:
            values[name] = f"{values[name]}, {value}" if name in values else value
        return values

    def header(self, name: str) -> str | None:
        return self.fields.get(name.lower())

    async def chunks(self) -> AsyncIterator[bytes]:
        encoding = (self.header("content-encoding") or "identity").strip().lower()
        if encoding in ("identity", ""):
            async for piece in self._raw():
                yield piece
            return
        if encoding not in ("gzip", "x-gzip", "deflate"):
            raise WireProtocolError(f"unsupported content-encoding {encoding!r}")
        inflate = zlib.decompressobj(zlib.MAX_WBITS | (16 if "gzip" in encoding else 0))
        try:
            async for piece in self._raw():
                if data := inflate.decompress(piece):
                    yield data
            if tail := inflate.flush():
                yield tail
        except zlib.error as exc:
            raise WireProtocolError(f"undecodable {encoding} body: {exc}") from None

    async def _raw(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None or self._complete:
            return
        timeout = self._client.read_timeout
        reader = conn.reader
        if self._framing == "none":
            self._complete = True
            return
        if self._framing == "length":
            while self._left > 0:
                data = await _read_body(reader, min(self._left, READ_SIZE), timeout)
                if not data:
                    raise WireProtocolError("the connection closed before the body's end")
                self._left -= len(data)
                yield data
            self._complete = True
            return
        if self._framing == "close":
            while data := await _read_body(reader, READ_SIZE, timeout):
                yield data
            self._complete = True
            self._keep_alive = False
            return
        # chunked: parsed from whole socket reads (one timeout per read, not per chunk)
        buf = _Buffer(reader, timeout)
        while True:
            while (line := buf.line(MAX_CHUNK_LINE, "chunk size line")) is None:
                await buf.fill("chunk size line")
            size_text = line.split(b";", 1)[0].strip()
            if not _CHUNK_SIZE.fullmatch(size_text):
                raise WireProtocolError(f"bad chunk size {size_text[:40]!r}")
            size = int(size_text, 16)
            if size == 0:
                while True:
                    while (trailer := buf.line(MAX_HEAD_BYTES, "trailer")) is None:
                        await buf.fill("trailer")
                    if not trailer:
                        break
                self._complete = True
                self._keep_alive = self._keep_alive and not buf.available
                return
            while size > 0:
                if not buf.available:
                    await buf.fill("chunk")
                piece = buf.take(size)
                size -= len(piece)
                yield piece
            while buf.available < 2:
                await buf.fill("chunk")
            if buf.take(2) != b"\r\n":
                raise WireProtocolError("a chunk did not end with CRLF")

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._complete and self._keep_alive and conn.usable:
            self._client._release(self._origin, conn)
        else:
            conn.close()


class _Buffer:
    """Bytes read from the socket and not parsed yet."""

    __slots__ = ("data", "pos", "reader", "timeout")

    def __init__(self, reader: asyncio.StreamReader, timeout: float) -> None:
        self.reader = reader
        self.timeout = timeout
        self.data = b""
        self.pos = 0

    @property
    def available(self) -> int:
        return len(self.data) - self.pos

    async def fill(self, what: str) -> None:
        more = await _read_body(self.reader, READ_SIZE, self.timeout)
        if not more:
            raise WireProtocolError(f"the connection closed inside a {what}")
        self.data = self.data[self.pos :] + more
        self.pos = 0

    def line(self, limit: int, what: str) -> bytes | None:
        """The next CRLF-terminated line without its CRLF, or None until it is complete."""
        end = self.data.find(b"\r\n", self.pos)
        if end < 0:
            if self.available > limit:
                raise WireProtocolError(f"{what} longer than {limit} bytes")
            return None
        if end - self.pos > limit:
            raise WireProtocolError(f"{what} longer than {limit} bytes")
        line = self.data[self.pos : end]
        self.pos = end + 2
        return line

    def take(self, n: int) -> bytes:
        piece = self.data[self.pos : self.pos + n]
        self.pos += len(piece)
        return piece


class WireClient:
    """Pooled HTTP/1.1 connections per origin. One instance per provider."""

    def __init__(self, *, connect_timeout: float, read_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._tls: ssl.SSLContext | None = None
        self._closed = False

    async def request(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> WireResponse:
        """Send the request; return once the status line and headers are in."""
        origin, target = _split(url)
        head = _request_head(method, target, origin, headers, len(body))
        message = head + body if len(body) < 256 * 1024 else None
        for attempt in (1, 2):
            conn = await self._acquire(origin)
            try:
                if message is not None:
                    conn.writer.write(message)
                else:
                    conn.writer.write(head)
                    conn.writer.write(body)
                await _read(conn.writer.drain(), self.read_timeout)
                status, reason, response_headers = await _response_head(
                    conn.reader, self.read_timeout
                )
            except (OSError, WireProtocolError) as exc:  # TLS errors (ssl.SSLError) included
                conn.close()
                # A pooled connection the server had closed: nothing was read, so the request
                # cannot have been processed; try once more on a new connection.
                if conn.reused and attempt == 1 and _nothing_received(exc):
                    continue
                if isinstance(exc, WireError):
                    raise
                raise WireProtocolError(f"connection lost before the response: {exc!r}") from None
            except BaseException:
                conn.close()
                raise
            return _response(self, origin, conn, method, status, reason, response_headers)
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    async def _acquire(self, origin: _Origin) -> _Connection:
        pool = self._idle.get(origin)
        while pool:
            conn = pool.pop()
            if conn.usable:
                conn.reused = True
                return conn
            conn.close()
        ssl_context: ssl.SSLContext | None = None
        if origin.scheme == "https":
            if self._tls is None:
                self._tls = _tls_context()
            ssl_context = self._tls
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    origin.host,
                    origin.port,
                    ssl=ssl_context,
                    server_hostname=origin.host if ssl_context else None,
                    limit=MAX_HEAD_BYTES,
                )
        except TimeoutError:
            raise WireConnectTimeout(
                f"no connection to {origin.authority} within {self.connect_timeout:g} s"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise WireConnectError(f"cannot connect to {origin.authority}: {exc}") from None
        return _Connection(reader, writer)

    def _release(self, origin: _Origin, conn: _Connection) -> None:
        pool = self._idle.setdefault(origin, [])
        if self._closed or len(pool) >= MAX_IDLE_PER_ORIGIN:
            conn.close()
        else:
            pool.append(conn)


# ---------------------------------------------------------------------------------------------


def _split(url: str) -> tuple[_Origin, str]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise WireConnectError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if scheme == "https" else 80)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return _Origin(scheme, parts.hostname, port), target


def _request_head(
    method: str, target: str, origin: _Origin, headers: Sequence[tuple[str, str]], length: int
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"host: {origin.authority}"]
    names = set()
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise WireProtocolError(f"header {name!r} holds a line break")
        names.add(name.lower())
        lines.append(f"{name}: {value}")
    if "content-length" not in names:
        lines.append(f"content-length: {length}")
    if "user-agent" not in names:
        lines.append("user-agent: cursor-byok")
    if "accept-encoding" not in names:
        lines.append("accept-encoding: identity")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read(awaitable: Awaitable[T], timeout: float) -> T:
    try:
        async with asyncio.timeout(timeout):
            return await awaitable
    except TimeoutError:
        raise WireTimeout(f"no data for {timeout:g} s") from None


async def _read_body(reader: asyncio.StreamReader, size: int, timeout: float) -> bytes:
    """A read of the body: a reset or TLS failure is a `WireError` like a close would be."""
    try:
        async with asyncio.timeout(timeout):
            return await reader.read(size)
    except TimeoutError:
        raise WireTimeout(f"no data for {timeout:g} s") from None
    except OSError as exc:
        raise WireProtocolError(f"connection lost mid-body: {exc}") from None


async def _response_head(
    reader: asyncio.StreamReader, timeout: float
) -> tuple[int, str, list[tuple[str, str]]]:
    interim = 0  # the status of an interim response already read
    while True:
        try:
            async with asyncio.timeout(timeout):
                raw = await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            raise WireTimeout(f"connected, but no response came within {timeout:g} s") from None
        except asyncio.IncompleteReadError as exc:
            if interim:  # the server had the request: not "nothing received", no retry
                raise WireProtocolError(
                    f"the connection closed after an interim {interim} response"
                ) from None
            if not exc.partial:
                raise ConnectionResetError("closed before any response byte") from None
            raise WireProtocolError("the connection closed inside the response head") from None
        except asyncio.LimitOverrunError:
            raise WireProtocolError(f"response head longer than {MAX_HEAD_BYTES} bytes") from None
        lines = raw[:-4].decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or len(code) != 3 or not _ascii_digits(code):
            raise WireProtocolError(f"bad status line {lines[0][:80]!r}")
        status = int(code)
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise WireProtocolError(f"bad header line {line[:80]!r}")
            headers.append((name.lower(), value.strip()))
        if status == 101:  # what follows is not HTTP: never read it as a body
            raise WireProtocolError(
                "unexpected 101 Switching Protocols: a provider call asks for no upgrade"
            )
        if 100 <= status < 200:
            interim = status
            continue  # an interim response (100 Continue, 103 Early Hints)
        return status, reason, headers


def _ascii_digits(text: str) -> bool:
    """`str.isdigit` alone also takes "²", which `int()` refuses."""
    return text.isascii() and text.isdigit()


def _response(
    client: WireClient,
    origin: _Origin,
    conn: _Connection,
    method: str,
    status: int,
    reason: str,
    headers: list[tuple[str, str]],
) -> WireResponse:
    values: dict[str, str] = {}
    for name, value in headers:
        values[name] = f"{values[name]}, {value}" if name in values else value
    keep_alive = "close" not in values.get("connection", "").lower()
    left = 0
    if method == "HEAD" or status in (204, 304):
        framing = "none"
    elif "chunked" in values.get("transfer-encoding", "").lower():
        framing = "chunked"
    elif "content-length" in values:
        text = values["content-length"].split(",")[0].strip()
        if not _ascii_digits(text):
            conn.close()
            raise WireProtocolError(f"bad content-length {text[:40]!r}")
        framing, left = "length", int(text)
    else:
        framing, keep_alive = "close", False
    return WireResponse(
        status=status,
        reason=reason,
        headers=headers,
        _client=client,
        _origin=origin,
        _conn=conn,
        _framing=framing,
        _left=left,
        _keep_alive=keep_alive,
    )


def _nothing_received(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionError)
