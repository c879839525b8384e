"""The server's own page fetch, for WebFetch calls from clients that cannot fetch.

Off unless the operator turns it on ([web_fetch] server_side): a server shared by a team must
not become the model's way into that team's network. Even on, it fetches public addresses
only (web/addresses.py: every form of a private, loopback, link-local, shared, reserved,
multicast, unspecified or metadata address is refused). Every host is read as aiohttp will
read it (yarl), resolved here once, each of its addresses checked, and the connection goes to
a checked address (aiohttp is handed the checked addresses instead of resolving again, so a
name that resolves differently the second time gains nothing). Redirects are followed by hand,
each hop checked the same way. Size, time and the number of redirects are bounded.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from ..llm.upstream import tls_context
from .addresses import HostError, IPAddress, host_address, is_public_address, refusal
from .convert import ConvertFailed, PageConverter
from .page_text import is_text
from .types import JobFailed, PageFetched, PageFetchJob

__all__ = ["FetchLimits", "IPAddress", "PageFetcher", "is_public_address"]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 65_536


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
        converter: PageConverter | None = None,
    ) -> None:
        self.enabled = enabled
        self.limits = limits
        self._allowed = allowed  # [web_fetch] allowed_networks widens it (tests: loopback)
        self._own_converter = converter is None
        self.converter = converter if converter is not None else PageConverter()

    async def aclose(self) -> None:
        """Ends the page converter's workers if this fetcher made them (the server's own
        converter is closed by whoever made it)."""
        if self._own_converter:
            await self.converter.aclose()

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
        connector = aiohttp.TCPConnector(resolver=resolver, ssl=await _tls(), use_dns_cache=False)
        async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
            target = _parsed(url)
            for _hop in range(self.limits.max_redirects + 1):
                target = await self._check(target, resolver)
                async with session.get(
                    target,
                    allow_redirects=False,
                    headers={"Accept": "text/html, text/plain;q=0.9, */*;q=0.5"},
                ) as response:
                    if response.status in _REDIRECTS and "Location" in response.headers:
                        target = _parsed(response.headers["Location"], base=target)
                        continue
                    return await self._page(str(target), response)
        raise _Refused(f"more than {self.limits.max_redirects} redirects")

    async def _check(self, url: URL, resolver: _Checked) -> URL:
        """`url` checked, as aiohttp will connect for it: a host that spells an address in a
        form aiohttp does not take (`2130706433`) becomes that address."""
        host = url.raw_host
        if url.scheme not in ("http", "https") or not host:
            raise _Refused(f"only http:// and https:// URLs are fetched, not {str(url)!r}")
        try:
            port = url.port or (443 if url.scheme == "https" else 80)
            literal = host_address(host)
        except HostError as exc:
            raise _Refused(f"refused: {exc}") from None
        except ValueError:
            raise _Refused(f"{str(url)!r} has an invalid port") from None
        if literal is not None:
            if not self._allowed(literal):
                raise _Refused(
                    f"refused: {host} is not a public address ({literal}: {_why(literal)}); "
                    "the server fetches public addresses only"
                )
            return url if host == str(literal) else url.with_host(str(literal))
        addresses = await self._addresses(host, port)
        if not addresses:
            raise _Refused(f"{host} does not resolve")
        if refused := [ip for ip in addresses if not self._allowed(ip)]:
            raise _Refused(
                f"refused: {host} resolves to a non-public address ({refused[0]}: "
                f"{_why(refused[0])}); the server fetches public addresses only"
            )
        resolver.addresses[host] = addresses
        if host.endswith(".."):  # aiohttp looks such a name up with one trailing dot
            resolver.addresses[host.rstrip(".") + "."] = addresses
        return url

    async def _addresses(self, host: str, port: int) -> list[IPAddress]:
        """The name's addresses, looked up once: the connection is handed these."""
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
        """The body read (bounded), then decoded and converted in a worker process."""
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
            shown = f"(The page is {kind}, not text: its content is not shown.)"
            return PageFetched(
                url=url, status=response.status, content_type=content_type, text=shown
            )
        converted = await self.converter.body_text(bytes(body), content_type)
        if isinstance(converted, ConvertFailed):
            raise _Refused(f"the page came, but its text could not be read: {converted.message}")
        text = converted
        if cut:
            text += (
                f"\n\n[Only the first {limit} bytes of the page were read (the server's "
                "limit); the rest is missing.]"
            )
        return PageFetched(url=url, status=response.status, content_type=content_type, text=text)


_TLS: list[ssl.SSLContext] = []


async def _tls() -> ssl.SSLContext:
    """One verifying context for every fetch, made off the event loop: loading the CA bundle
    takes ~40 ms, which four fetches at once made a 170 ms stall of every run."""
    if not _TLS:
        context = await asyncio.to_thread(tls_context)
        if not _TLS:
            _TLS.append(context)
    return _TLS[0]


def _parsed(url: str, *, base: URL | None = None) -> URL:
    try:
        target = URL(url)
        return base.join(target) if base is not None else target
    except (ValueError, TypeError):
        raise _Refused(f"{url[:300]!r} is not a URL the server can fetch") from None


def _why(address: IPAddress) -> str:
    return refusal(address) or "not allowed here"
