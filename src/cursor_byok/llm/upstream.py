"""The HTTP client of provider calls: aiohttp (its C parser), set up for one POST whose bytes
are made already and a body read as it comes; its failures become the four `UpstreamError`s
that http.py reports.

Why aiohttp: per streaming call it costs no more CPU than the hand-written client it replaced,
and far less than httpx (docs/benchmarks-server.md, "Upstream clients").

What it is set to do: keep-alive connections pooled per origin, no cap on concurrent calls;
TLS verified against `SSL_CERT_FILE` / `SSL_CERT_DIR` when set, else certifi's bundle;
redirects not followed (http.py names the 3xx); interim responses (100, 103) skipped, a 101
refused; `gzip`/`deflate` bodies decoded, `identity` asked for; no cookies kept. Timeouts:
connecting (TCP and TLS) and each read, from the provider's settings.

Proxies come from the environment, read here rather than by aiohttp's `trust_env`, which
ignores `ALL_PROXY` and `https://` proxy URLs, and looks in `~/.netrc` on a thread for every
request (adding a Basic `Authorization` from it to calls that carry their key elsewhere):
`HTTPS_PROXY` / `HTTP_PROXY` (lower case wins), then `ALL_PROXY`, both skipped for hosts in
`NO_PROXY`. Only `http://` and `https://` proxies: a SOCKS proxy is a clear error.
"""

from __future__ import annotations

import errno
import os
import ssl
import urllib.request
from collections.abc import AsyncIterator, Mapping, Sequence
from urllib.parse import urlsplit
from urllib.request import getproxies_environment

import aiohttp
import certifi

PROXY_VARIABLES = ("https_proxy", "http_proxy", "all_proxy")
PROXY_SCHEMES = ("http", "https")
MAX_DESCRIPTION = 400
DEFAULT_HEADERS = {"user-agent": "cursor-byok", "accept-encoding": "identity"}
# From this size on a request body is written apart from the request head (`_Body`).
SPLIT_BODY_FROM = 64 * 1024


class _Body(aiohttp.BytesPayload):
    """A large body written after the request head, not joined to it: aiohttp coalesces the
    head with the first body chunk into one new buffer (on Python before 3.12.9), a copy of
    the whole history on every model call of a long conversation. An empty first write sends
    the head alone; the body then goes to the socket as it is."""

    async def write_with_length(
        self, writer: aiohttp.abc.AbstractStreamWriter, content_length: int | None
    ) -> None:
        await writer.write(b"")
        await super().write_with_length(writer, content_length)


class UpstreamError(Exception):
    """The HTTP exchange failed; `str()` says how, without any header value."""


class ConnectFailed(UpstreamError):
    """No connection (refused, unreachable, DNS, TLS, no usable proxy): nothing was sent."""


class UpstreamTimeout(UpstreamError):
    """Connecting or a read took longer than allowed."""


class ConnectTimeout(UpstreamTimeout):
    """No connection within the connect timeout: nothing was sent."""


class ProtocolError(UpstreamError):
    """The server broke HTTP/1.1 or the connection broke once connected, or the request
    could not be sent (a header holding a line break)."""


class ConnectionReset(ProtocolError):
    """The provider, or something between (a proxy, a load balancer, NAT), reset the connection
    (ECONNRESET) while the body streamed: the answer is cut short."""


def _proxy_scheme(value: str) -> str:
    return value.split("://", 1)[0].lower() if "://" in value else "http"


def tls_context() -> ssl.SSLContext:
    """Verify providers against `SSL_CERT_FILE` / `SSL_CERT_DIR` when set, else certifi's."""
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if not cafile and not capath:
        cafile = certifi.where()
    context = ssl.create_default_context(cafile=cafile, capath=capath)
    context.set_alpn_protocols(["http/1.1"])
    return context


class Proxies:
    """The proxy for each URL called (None: direct), from the environment as it was when the
    client started. Kept per URL string, so a call costs one dict lookup, not a URL parse."""

    MAX_URLS = 1024  # a provider calls a few URLs (one per model at most); a bound all the same

    def __init__(self) -> None:
        self._env = getproxies_environment()  # a lower-case name wins over its upper case
        self._by_url: dict[str, str | None] = {}

    def for_url(self, url: str) -> str | None:
        """The proxy for `url`; `ConnectFailed` for a URL that is not http(s) or a proxy that
        is not an HTTP proxy."""
        try:
            return self._by_url[url]
        except KeyError:
            pass
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConnectFailed(f"not an http(s) URL: {url[:200]!r}")
        proxy = self._resolve(parts.scheme, parts.hostname, parts.port)
        if proxy is not None and (scheme := _proxy_scheme(proxy)) not in PROXY_SCHEMES:
            raise ConnectFailed(
                f"the proxy for {parts.scheme}:// calls is a {scheme}:// proxy; provider "
                f"calls go only through http:// or https:// proxies"
            )
        if len(self._by_url) >= self.MAX_URLS:
            self._by_url.clear()
        self._by_url[url] = proxy
        return proxy

    def _resolve(self, scheme: str, host: str, port: int | None) -> str | None:
        proxy = self._env.get(scheme) or self._env.get("all")
        if not proxy:
            return None
        where = f"{host}:{port}" if port else host
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # untyped
        if self._env.get("no") and bypass(where, self._env):
            return None
        return proxy if "://" in proxy else f"http://{proxy}"


class UpstreamResponse:
    """A response whose body is read with `chunks()`; `aclose()` returns the connection to the
    pool after a body read to its end, and drops it otherwise; `abort()` drops it at once."""

    __slots__ = (
        "_close_delimited",
        "_complete",
        "_protocol",
        "_read_timeout",
        "_received",
        "_response",
        "fields",
        "status",
    )

    def __init__(self, response: aiohttp.ClientResponse, read_timeout: float) -> None:
        self._response = response
        self._read_timeout = read_timeout
        self._complete = False
        self._received = 0
        self.status = response.status
        self.fields: Mapping[str, str] = response.headers
        # The connection's protocol keeps the socket error that ended it. A body without a
        # length or chunked framing ends when the connection does, so aiohttp reads a reset
        # there as a clean end of body: only the protocol still knows it was a reset.
        connection = response.connection
        self._protocol = connection.protocol if connection is not None else None
        framing = response.headers.get("transfer-encoding", "").lower()
        self._close_delimited = "content-length" not in response.headers and (
            "chunked" not in framing
        )

    async def chunks(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while data := await content.readany():
                self._received += len(data)
                yield data
        except aiohttp.ServerTimeoutError:
            raise UpstreamTimeout(f"no data for {self._read_timeout:g} s") from None
        except (aiohttp.ClientError, OSError) as exc:  # resets and TLS errors included
            if (reset := self._reset()) is not None:
                raise reset from None
            raise ProtocolError(f"connection lost mid-body: {_describe(exc)}") from None
        if self._close_delimited:
            if (reset := self._reset()) is not None:
                raise reset
            failure = self._socket_failure()
            if failure is not None:
                raise ProtocolError(f"connection lost mid-body: {_describe(failure)}")
        self._complete = True

    def _socket_failure(self) -> OSError | None:
        """The socket error that ended the connection, if one did (None: still open, or a FIN).
        Read only while this response still owns the connection (an unfinished body)."""
        protocol = self._protocol
        failure = protocol.exception() if protocol is not None else None
        return failure if isinstance(failure, OSError) else None

    def _reset(self) -> ConnectionReset | None:
        failure = self._socket_failure()
        if failure is None or failure.errno != errno.ECONNRESET:
            return None
        return ConnectionReset(f"ECONNRESET after {self._received} bytes of the response body")

    async def aclose(self) -> None:
        if self._complete:
            self._response.release()
        else:
            self._response.close()

    def abort(self) -> None:
        """Close the connection now: a call ended before its body (canceled, superseded)."""
        self._complete = False
        self._response.close()


class Upstream:
    """One pool of connections (an aiohttp session), made in the running loop at the first
    call. One per provider: the timeouts are the provider's."""

    def __init__(self, *, connect_timeout: float, read_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._session: aiohttp.ClientSession | None = None
        self._proxies: Proxies | None = None

    def _start(self) -> tuple[aiohttp.ClientSession, Proxies]:
        if self._session is None or self._proxies is None:
            self._proxies = Proxies()
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=tls_context(), limit=0),
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=self.connect_timeout, sock_read=self.read_timeout
                ),
                headers=DEFAULT_HEADERS,
                skip_auto_headers=("content-type",),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            )
        return self._session, self._proxies

    async def request(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> UpstreamResponse:
        """Send the request; return once the final status line and headers are in."""
        session, proxies = self._start()
        proxy = proxies.for_url(url)
        try:
            data = _Body(body) if len(body) >= SPLIT_BODY_FROM else body
            response = await session.request(
                method, url, data=data, headers=headers, allow_redirects=False, proxy=proxy
            )
        except aiohttp.ConnectionTimeoutError:
            where = urlsplit(url).netloc
            raise ConnectTimeout(
                f"no connection to {where} within {self.connect_timeout:g} s"
            ) from None
        except aiohttp.ServerTimeoutError:
            raise UpstreamTimeout(
                f"connected, but no response came within {self.read_timeout:g} s"
            ) from None
        except aiohttp.ClientConnectorError as exc:
            reason = getattr(exc, "certificate_error", None) or exc.os_error
            raise ConnectFailed(f"cannot connect to {exc.host}:{exc.port}: {reason}") from None
        except aiohttp.ClientHttpProxyError as exc:  # the proxy answered CONNECT with an error
            raise ConnectFailed(
                f"the proxy refused the tunnel: {exc.status} {exc.message}"
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProtocolError(f"connection lost before the response: {_describe(exc)}") from None
        except ValueError as exc:  # aiohttp refuses a header holding CR, LF or NUL
            raise ProtocolError(f"the request was not sent: {exc}") from None
        if response.status == 101:  # what follows is not HTTP: never read it as a body
            response.close()
            raise ProtocolError(
                "unexpected 101 Switching Protocols: a provider call asks for no upgrade"
            )
        return UpstreamResponse(response, self.read_timeout)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def _describe(exc: BaseException) -> str:
    """The failure in one line: aiohttp wraps parser and socket errors, and its parser's
    messages span lines (the bad bytes, a caret under the fault)."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        inside = "" if isinstance(exc.message, str) else " inside the response head"
        return f"the server closed the connection{inside}"
    texts: list[str] = []
    cause: BaseException | None = exc
    while cause is not None and len(texts) < 3:
        message = getattr(cause, "message", None)
        text = message if isinstance(message, str) and message else str(cause)
        text = text or type(cause).__name__
        if not any(text in seen for seen in texts):
            texts.append(text)
        cause = cause.__cause__
    return " ".join(" ".join(texts).split())[:MAX_DESCRIPTION]
