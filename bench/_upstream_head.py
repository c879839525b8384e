"""How long a provider call takes to reach its response head, client side only: the
production client (llm/upstream.py, aiohttp) against a bare asyncio exchange on a keep-alive
connection (one write of head and body, `readuntil` the end of the response head), in one run.

    .venv/bin/python bench/_upstream_head.py [--calls 3000] [--rounds 3]

The upstream is a raw asyncio HTTP/1.1 server in a child process that answers each whole
request at once with a short chunked SSE body. Calls alternate between the two clients, so
a slow phase of the shared machine falls on both; the first 10 % of each round are warm-up.
Printed: per round, the median time from the call to its response head, and where the
production client spends it (before its first socket write, the wait for the first read,
after that read). Not run by `bench/run` (its name starts with `_`); its figures are in
docs/benchmarks-server.md, "Issue 28, sixth pass".
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp.client_proto as client_proto

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from cursor_byok.llm.upstream import Upstream  # noqa: E402

SERVER = r"""
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from tests.support.raw_server import read_request
SSE = b"data: {}\n\n"
ANSWER = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
          b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(SSE), SSE))
async def serve(reader, writer):
    try:
        while True:
            await read_request(reader)
            writer.write(ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""

BODY = b'{"model":"m","messages":[' + b'{"role":"user","content":"hello there"},' * 120 + b"{}]}"
HEADERS = [("content-type", "application/json"), ("authorization", "Bearer sk-bench")]


class Marks:
    """When the production client's connection first wrote and first read, per call."""

    def __init__(self) -> None:
        self.write: float | None = None
        self.read: float | None = None
        original_received = client_proto.ResponseHandler.data_received
        marks = self

        def data_received(handler: client_proto.ResponseHandler, data: bytes) -> None:
            if marks.read is None:
                marks.read = time.perf_counter()
            original_received(handler, data)

        client_proto.ResponseHandler.data_received = data_received  # type: ignore[method-assign]

    def watch(self, transport: asyncio.BaseTransport) -> None:
        original_write = transport.write  # type: ignore[attr-defined]
        marks = self

        def write(data: bytes) -> None:
            if marks.write is None:
                marks.write = time.perf_counter()
            original_write(data)

        transport.write = write  # type: ignore[attr-defined]


async def production(upstream: Upstream, url: str) -> float:
    start = time.perf_counter()
    response = await upstream.request("POST", url, HEADERS, BODY)
    head = time.perf_counter() - start
    async for _ in response.chunks():
        pass
    await response.aclose()
    return head


class Bare:
    """The least an asyncio client does: one write, read to the end of the head."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            + b"".join(f"{k}: {v}\r\n".encode() for k, v in HEADERS)
            + b"content-length: %d\r\n\r\n" % len(BODY)
        )

    async def call(self) -> float:
        if self.streams is None:
            self.streams = await asyncio.open_connection("127.0.0.1", self.port)
            sock = self.streams[1].get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader, writer = self.streams
        start = time.perf_counter()
        writer.write(self.head + BODY)
        await reader.readuntil(b"\r\n\r\n")
        head = time.perf_counter() - start
        await reader.readuntil(b"0\r\n\r\n")
        return head


async def one_round(port: int, calls: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    upstream = Upstream(connect_timeout=5, read_timeout=5)
    bare = Bare(port)
    marks = Marks()
    heads: dict[str, list[float]] = {"upstream": [], "bare": [], "pre": [], "wait": [], "post": []}
    watched: set[int] = set()
    try:
        for n in range(calls):
            marks.write = marks.read = None
            start = time.perf_counter()
            head = await production(upstream, url)
            session = upstream._session
            assert session is not None
            for conns in session.connector._conns.values():  # type: ignore[union-attr]
                for proto, _ in conns:
                    if id(proto.transport) not in watched and proto.transport is not None:
                        watched.add(id(proto.transport))
                        marks.watch(proto.transport)
            heads["upstream"].append(head)
            if marks.write is not None and marks.read is not None:
                heads["pre"].append(marks.write - start)
                heads["wait"].append(marks.read - marks.write)
                heads["post"].append(start + head - marks.read)
            heads["bare"].append(await bare.call())
            del n
    finally:
        await upstream.aclose()
        if bare.streams is not None:
            bare.streams[1].close()
    skip = calls // 10
    return {k: statistics.median(v[skip:]) * 1e6 for k, v in heads.items() if v[skip:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(REPO)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        print("| round | llm/upstream.py to head | bare asyncio to head | difference | "
              "upstream.py: before its write | wait for the first read | after it |")  # fmt: skip
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for r in range(1, args.rounds + 1):
            m = asyncio.run(one_round(port, args.calls))
            print(
                f"| {r} | {m['upstream']:.0f} µs | {m['bare']:.0f} µs | "
                f"+{m['upstream'] - m['bare']:.0f} µs | {m.get('pre', 0):.0f} µs | "
                f"{m.get('wait', 0):.0f} µs | {m.get('post', 0):.0f} µs |"
            )
    finally:
        server.kill()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
