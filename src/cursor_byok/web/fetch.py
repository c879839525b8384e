"""The server's own page fetch, for WebFetch calls from clients that cannot fetch.

Off unless the operator turns it on ([web_fetch] server_side): a server shared by a team must
not become the model's way into that team's network. Even on, it fetches public addresses
only. Every host is resolved here, each of its addresses is checked, and the connection goes
to a checked address (aiohttp is handed the checked addresses instead of resolving again, so a
name that resolves differently the second time gains nothing). Redirects are followed by hand,
each hop checked the same way. Size, time and the number of redirects are bounded.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from ..llm.upstream import tls_context
from .page_text import is_text, page_text
from .types import JobFailed, PageFetched, PageFetchJob

__all__ = ["FetchLimits", "PageFetcher", "is_public_address"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 65_536


def is_public_address(address: IPAddress) -> bool:
    """Whether `address` is a public unicast address: not loopback, private, link-local
    (cloud metadata lives there), shared, reserved, multicast or unspecified; an IPv4 address
    wrapped in IPv6 is judged as the IPv4 address it carries."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is not None:
            return is_public_address(inner)
    return address.is_global and not address.is_multicast


@dataclass(frozen=True, slots=True)
class FetchLimits:
    max_bytes: int = 2_000_000
    timeout_s: float = 20.0
    max_redirects: int = 5


class _Refused(Exception):
    """A URL the server will not fetch; the message is for the model."""


class _Checked(AbstractResolver):
    """Answers aiohttp with the addresses checked for each host, never with a new lookup."""

    def __init__(self) -> None:
        self.addresses: dict[str, list[IPAddress]] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        checked = self.addresses.get(host)
        if not checked:
            raise OSError(f"{host} was not checked before connecting")
        return [
            ResolveResult(
                hostname=host,
                host=str(ip),
                port=port,
                family=socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for ip in checked
        ]

    async def close(self) -> None:
        return None


class PageFetcher:
    """Fetches one page per job; every failure is a `JobFailed` the model reads."""

    def __init__(
        self,
        *,
        enabled: bool,
        limits: FetchLimits = FetchLimits(),
        allowed: Callable[[IPAddress], bool] = is_public_address,
    ) -> None:
        self.enabled = enabled
        self.limits = limits
        self._allowed = allowed  # tests widen it to their own loopback server

    async def fetch(self, job: PageFetchJob) -> PageFetched | JobFailed:
        if not self.enabled:
            return JobFailed(
                message="this server does not fetch pages for clients ([web_fetch] server_side "
                "is off)"
            )
        try:
            async with asyncio.timeout(self.limits.timeout_s):
                return await self._fetch(job.url)
        except _Refused as exc:
            return JobFailed(message=str(exc))
        except TimeoutError:
            return JobFailed(message=f"no complete answer within {self.limits.timeout_s:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            return JobFailed(message=f"the fetch failed: {type(exc).__name__}")

    async def _fetch(self, url: str) -> PageFetched:
        resolver = _Checked()
        connector = aiohttp.TCPConnector(resolver=resolver, ssl=tls_context(), use_dns_cache=False)
        async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
            for _hop in range(self.limits.max_redirects + 1):
                await self._check(url, resolver)
                async with session.get(
                    url,
                    allow_redirects=False,
                    headers={"Accept": "text/html, text/plain;q=0.9, */*;q=0.5"},
                ) as response:
                    if response.status in _REDIRECTS and "Location" in response.headers:
                        url = urljoin(url, response.headers["Location"])
                        continue
                    return await self._page(url, response)
        raise _Refused(f"more than {self.limits.max_redirects} redirects")

    async def _check(self, url: str, resolver: _Checked) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _Refused(f"only http:// and https:// URLs are fetched, not {url!r}")
        host = parts.hostname
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise _Refused(f"{url!r} has an invalid port") from None
        addresses = await self._addresses(host, port)
        if not addresses:
            raise _Refused(f"{host} does not resolve")
        if refused := [ip for ip in addresses if not self._allowed(ip)]:
            raise _Refused(
                f"refused: {host} resolves to a non-public address ({refused[0]}); the server "
                "fetches public addresses only"
            )
        resolver.addresses[host] = addresses

    async def _addresses(self, host: str, port: int) -> list[IPAddress]:
        try:
            return [ipaddress.ip_address(host.strip("[]"))]
        except ValueError:
            pass
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror:
            return []
        out: list[IPAddress] = []
        for info in infos:
            raw: Any = info[4][0]
            ip = ipaddress.ip_address(str(raw).split("%", 1)[0])
            if ip not in out:
                out.append(ip)
        return out

    async def _page(self, url: str, response: aiohttp.ClientResponse) -> PageFetched:
        limit = self.limits.max_bytes
        body = bytearray()
        cut = False
        async for chunk in response.content.iter_chunked(_CHUNK):
            body.extend(chunk)
            if len(body) > limit:
                del body[limit:]
                cut = True
                break
        content_type = response.headers.get("Content-Type", "")
        if not is_text(content_type):
            kind = content_type.split(";", 1)[0].strip()
            text = f"(The page is {kind}, not text: its content is not shown.)"
            return PageFetched(
                url=url, status=response.status, content_type=content_type, text=text
            )
        charset = response.charset or "utf-8"
        try:
            content = body.decode(charset, errors="replace")
        except LookupError:
            content = body.decode("utf-8", errors="replace")
        text = page_text(content, content_type)
        if cut:
            text += (
                f"\n\n[Only the first {limit} bytes of the page were read (the server's "
                "limit); the rest is missing.]"
            )
        return PageFetched(url=url, status=response.status, content_type=content_type, text=text)
