"""One bounded JSON exchange with a search backend: time, response size and every failure
turned into a `JobFailed` whose message names the backend, never its key."""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp

from ...llm.upstream import DEFAULT_HEADERS, Proxies, UpstreamError, tls_context
from ..types import JobFailed

__all__ = ["MAX_RESPONSE_BYTES", "request_json"]

# A page of search results is a few tens of KiB; more is not a search answer.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024


@functools.cache
def _tls() -> ssl.SSLContext:
    """One verifying context for every search (loading the CA bundle costs tens of ms)."""
    return tls_context()


async def _body(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The body, or None when it is larger than `limit`."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def request_json(
    backend: str,
    method: str,
    url: str,
    *,
    timeout_s: float,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    body: Any = None,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> Any | JobFailed:
    """The decoded JSON answer of one request, or why there is none. `timeout_s` bounds the
    whole exchange: connect, send, and read the body."""
    who = f"search backend {backend!r}"
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    data = json.dumps(body).encode() if body is not None else None
    send_headers = dict(headers or {})
    if data is not None:
        send_headers["content-type"] = "application/json"
    send_headers.setdefault("accept", "application/json")
    try:
        proxy = Proxies().for_url(url)
        async with (
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=_tls()),
                timeout=timeout,
                headers=DEFAULT_HEADERS,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
            ) as session,
            session.request(
                method,
                url,
                params=params,
                data=data,
                headers=send_headers,
                proxy=proxy,
                allow_redirects=False,
            ) as response,
        ):
            status = response.status
            raw = await _body(response, max_bytes)
    except TimeoutError:
        return JobFailed(message=f"{who} gave no answer within {timeout_s:g} s")
    except aiohttp.ClientConnectorError as exc:
        return JobFailed(message=f"{who} is unreachable ({exc.host}:{exc.port})")
    except (aiohttp.ClientError, OSError) as exc:
        return JobFailed(message=f"{who}: the connection failed ({type(exc).__name__})")
    except (UpstreamError, ValueError) as exc:  # a bad URL or proxy; a header aiohttp refuses
        return JobFailed(message=f"{who}: the request could not be sent ({type(exc).__name__})")
    if raw is None:
        return JobFailed(message=f"{who} answered more than {max_bytes} bytes; not read")
    if status in (401, 403):
        return JobFailed(
            message=f"{who} refused the request (HTTP {status}): check its key or settings"
        )
    if status == 429:
        return JobFailed(message=f"{who} is rate-limiting this server (HTTP 429)")
    if 300 <= status < 400:
        return JobFailed(
            message=f"{who} answered HTTP {status}, a redirect (not followed): set its url to "
            "the address it redirects to"
        )
    if not 200 <= status < 300:
        return JobFailed(message=f"{who} answered HTTP {status}")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return JobFailed(message=f"{who} answered with something that is not JSON")
