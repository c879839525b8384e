"""Run inside a network namespace with only `lo` (test_fetch_netns.py starts it there): fetch
each case's URL with the server's real page fetcher and report, per case, what the model read
and every connect and name lookup the process made (Python's audit events `socket.connect`
and `socket.getaddrinfo`, which every socket of asyncio and aiohttp goes through), plus the
connections a listener on every loopback address accepted.

Cases come as JSON on stdin: [{"id", "url", "via": "direct" | "redirect" | "unguarded"}].
"direct" fetches the URL with the real policy; "redirect" fetches a loopback page that
redirects to it (the policy widened to that one page server, 127.88.0.1, nothing else);
"unguarded" turns the policy off, the harness's own control: it must see the connect a miss
would make. Results go to stdout as JSON, one object per case, in order.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import sys
from typing import Any
from urllib.parse import quote

from aiohttp import web

from cursor_byok.web.fetch import IPAddress, PageFetcher, is_public_address
from cursor_byok.web.types import JobFailed, PageFetched, PageFetchJob

PAGE_HOST = "127.88.0.1"  # the redirecting page server (lo holds all of 127.0.0.0/8)
PAGE_IP = ipaddress.ip_address(PAGE_HOST)
VICTIM_PORT = 18080  # what every case's URL names: a listener waits there on every address

events: list[tuple[str, str]] = []


def audit(name: str, args: tuple[Any, ...]) -> None:
    if name == "socket.connect":
        address = args[1]
        events.append(("connect", str(address[0] if isinstance(address, tuple) else address)))
    elif name == "socket.getaddrinfo":
        events.append(("lookup", str(args[0])))


class Victim:
    """Accepts on 0.0.0.0 and [::] at VICTIM_PORT: a connection a miss made lands here."""

    def __init__(self) -> None:
        self.accepted = 0

    async def serve(self, _r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecret")
        await writer.drain()
        writer.close()


def page_server_allowed(ip: IPAddress) -> bool:
    return ip == PAGE_IP or is_public_address(ip)


async def page_server() -> tuple[web.AppRunner, int]:
    async def hop(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def page(_: web.Request) -> web.Response:
        return web.Response(text="<p>the page</p>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/hop", hop)
    app.router.add_get("/page", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, PAGE_HOST, 0)
    await site.start()
    return runner, runner.addresses[0][1]


async def main() -> None:
    cases: list[dict[str, str]] = json.load(sys.stdin)
    victim = Victim()
    v4 = await asyncio.start_server(victim.serve, "0.0.0.0", VICTIM_PORT)
    six = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    six.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    six.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    six.bind(("::", VICTIM_PORT))
    v6 = await asyncio.start_server(victim.serve, sock=six)
    runner, page_port = await page_server()
    sys.addaudithook(audit)
    out: list[dict[str, Any]] = []
    fetchers: list[PageFetcher] = []
    try:
        for case in cases:
            url = case["url"].replace("{port}", str(VICTIM_PORT))
            via = case["via"]
            if via == "redirect":
                fetcher = PageFetcher(enabled=True, allowed=page_server_allowed)
                url = f"http://{PAGE_HOST}:{page_port}/hop?to={quote(url, safe='')}"
            elif via == "unguarded":
                fetcher = PageFetcher(enabled=True, allowed=lambda _ip: True)
            else:
                fetcher = PageFetcher(enabled=True)
            fetchers.append(fetcher)
            events.clear()
            accepted = victim.accepted
            got = await fetcher.fetch(PageFetchJob(url=url))
            await asyncio.sleep(0.01)  # a connection in flight lands before the count
            said = got.message if isinstance(got, JobFailed) else "fetched"
            if isinstance(got, PageFetched):
                said += f": {got.text}"
            out.append(
                {
                    "id": case["id"],
                    "said": said,
                    "connects": [where for kind, where in events if kind == "connect"],
                    "lookups": [what for kind, what in events if kind == "lookup"],
                    "victim_accepted": victim.accepted - accepted,
                    "page_port": page_port,
                }
            )
    finally:
        for fetcher in fetchers:
            await fetcher.aclose()
        await runner.cleanup()
        v4.close()
        v6.close()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main())
