"""CPU per streaming model call, client side only: the production client (llm/upstream.py,
aiohttp set up as provider calls use it) against the hand-written HTTP/1.1 client it replaced
(llm/wire.py, loaded from git history: commit ac01b2a), httpx, bare aiohttp (its C parser) and
the floor relay's own upstream client (bench/floor_relay.py's `Upstream` and `ChatStream`), in
one run.

    .venv/bin/python bench/upstream_clients.py                      # CPU time, interleaved
    .venv/bin/python bench/upstream_clients.py --rounds 12 --calls 20 --streams long
    .venv/bin/python bench/upstream_clients.py --callgrind          # instructions (valgrind)
    .venv/bin/python bench/upstream_clients.py --callgrind --clients wire upstream

`wire` needs the git history (`git show ac01b2a:src/cursor_byok/llm/wire.py`); `httpx` needs
the dev extras. `--callgrind` needs valgrind.

The upstream is a raw asyncio HTTP/1.1 keep-alive server in its own process (not measured),
replaying a recorded OpenAI Chat Completions stream from tests/fixtures/providers as a chunked
`text/event-stream`, one HTTP chunk per SSE event: `short` is openai-chat/text-basic.sse (34
events, 8.7 KB), `long` is openai-chat/text-long-usage-every-chunk.sse (304 events, 100 KB).
In the `paced` mode each event is its own write, some milliseconds apart, so the client reads
one event per socket read as from a real provider; in `burst` the whole response is one write.

Each call, for every client: a 6 KB JSON request body with its headers (the key in an
`authorization` header) on a pooled keep-alive connection, the response head, the body read as
it arrives, each read handed to the same consumer (the floor relay's SSE split and JSON decode
of the text deltas; the floor's `ChatStream` does that inside its de-chunking), and the
connection back to the pool. `consumer` is that consumer alone over the same pieces, in memory:
subtract it to see what the HTTP client costs.

- default: each (round, client) is a fresh child process that makes 2 warm-up calls, then
  `--calls` timed calls, and reports `time.process_time()` per call (every thread of the
  process). The order of the clients rotates from round to round (A/B/C/D, B/C/D/A, ...), so a
  slow phase of the shared machine falls on all; the table gives the median of the rounds.
- `--callgrind`: each client runs under `valgrind --tool=callgrind` twice, with `--few` and
  `--many` calls after the warm-up; instructions per call = the difference of the two totals
  divided by the difference of the calls, so start-up, imports and the first connection cancel
  out. Instruction counts do not change with the machine's load (to about 1 %), so this is the
  A/B that sees small differences. The pacing is stretched (`--callgrind-pace-ms`) because
  valgrind runs the client some 50x slower, and the `reads` column shows whether each event
  still came in a read of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

FIXTURES = REPO / "tests" / "fixtures" / "providers" / "openai-chat"
STREAMS = {"short": "text-basic.sse", "long": "text-long-usage-every-chunk.sse"}
CLIENTS = ("floor", "wire", "upstream", "httpx", "aiohttp", "consumer")
WIRE_COMMIT = "ac01b2a"  # the last commit with llm/wire.py
PATH = "/v1/chat/completions"
WARMUP = 2
KEY = "sk-bench-not-a-secret"

_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"x-request-id: req_0123456789abcdef\r\ntransfer-encoding: chunked\r\n\r\n"
)


def events(stream: str) -> list[bytes]:
    raw = (FIXTURES / STREAMS[stream]).read_bytes().replace(b"\r\n", b"\n")
    return [part + b"\n\n" for part in raw.split(b"\n\n") if part.strip()]


def request_body() -> bytes:
    """A first request of a conversation, about 6 KB as in docs/benchmarks-server.md."""
    code = "def handler(request):\n    return respond(request.body)\n" * 110
    return json.dumps(
        {
            "model": "gpt-4.1-nano",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Explain this file:\n" + code},
            ],
        }
    ).encode()


# -- the upstream ------------------------------------------------------------------------------


async def serve_upstream() -> None:
    bodies = {name: [b"%x\r\n%s\r\n" % (len(e), e) for e in events(name)] for name in STREAMS}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                query = dict(
                    p.split("=", 1)
                    for p in head.split(b" ", 2)[1].decode().partition("?")[2].split("&")
                    if "=" in p
                )
                chunks = bodies[query.get("stream", "short")]
                pace = float(query.get("pace", "0")) / 1000
                if pace <= 0:
                    writer.write(_HEAD + b"".join(chunks) + b"0\r\n\r\n")
                else:
                    writer.write(_HEAD + chunks[0])
                    for chunk in chunks[1:-1]:
                        await asyncio.sleep(pace)
                        writer.write(chunk)
                    await asyncio.sleep(pace)
                    writer.write(chunks[-1] + b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=64)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


# -- the consumer every client feeds (the SSE half of floor_relay.ChatStream.feed) -------------


class Texts:
    def __init__(self) -> None:
        import msgspec

        self._decode = msgspec.json.decode
        self.sse = bytearray()
        self.texts: list[str] = []
        self.usage: dict[str, Any] = {}
        self.reads = 0

    def feed(self, data: bytes) -> None:
        self.reads += 1
        sse = self.sse
        sse += data
        while (newline := sse.find(b"\n")) >= 0:
            line_bytes = bytes(sse[:newline]).rstrip(b"\r")
            del sse[: newline + 1]
            if not line_bytes.startswith(b"data: ") or line_bytes == b"data: [DONE]":
                continue
            chunk = self._decode(line_bytes[6:])
            for choice in chunk.get("choices") or ():
                content = (choice.get("delta") or {}).get("content")
                if content:
                    self.texts.append(content)
            if chunk.get("usage"):
                self.usage = chunk["usage"]


Call = Callable[[], Awaitable[Texts]]


def headers() -> list[tuple[str, str]]:
    return [
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
        ("authorization", f"Bearer {KEY}"),
    ]


def legacy_wire() -> Any:
    """llm/wire.py as it was before aiohttp replaced it, imported from git history."""
    import importlib.util

    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{WIRE_COMMIT}:src/cursor_byok/llm/wire.py"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "legacy_wire.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("legacy_wire", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["legacy_wire"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


async def make_call(client: str, base: str, target: str, body: bytes) -> tuple[Call, Any]:
    """One streaming call with `client`, and what to close at the end."""
    url = base + target
    if client == "upstream":
        from cursor_byok.llm.upstream import Upstream

        production = Upstream(connect_timeout=10, read_timeout=60)

        async def via_upstream() -> Texts:
            out = Texts()
            response = await production.request("POST", url, headers(), body)
            assert response.status == 200
            async for piece in response.chunks():
                out.feed(piece)
            await response.aclose()
            return out

        return via_upstream, production.aclose
    if client == "wire":
        wire = legacy_wire().WireClient(connect_timeout=10, read_timeout=60)

        async def via_wire() -> Texts:
            out = Texts()
            response = await wire.request("POST", url, headers(), body)
            assert response.status == 200
            async for piece in response.chunks():
                out.feed(piece)
            await response.aclose()
            return out

        return via_wire, wire.aclose
    if client == "httpx":
        import httpx

        # as llm/http.py built it when a proxy was set (before aiohttp, commit ac01b2a)
        hx = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=10, read=60, write=60, pool=10),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

        async def via_httpx() -> Texts:
            out = Texts()
            request = hx.build_request("POST", url, content=body, headers=headers())
            response = await hx.send(request, stream=True)
            assert response.status_code == 200
            async for piece in response.aiter_bytes():
                out.feed(piece)
            await response.aclose()
            return out

        return via_httpx, hx.aclose
    if client == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
            timeout=aiohttp.ClientTimeout(sock_connect=10, sock_read=60),
        )

        async def via_aiohttp() -> Texts:
            out = Texts()
            async with session.post(url, data=body, headers=headers()) as response:
                assert response.status == 200
                async for piece in response.content.iter_any():
                    out.feed(piece)
            return out

        return via_aiohttp, session.close
    if client == "floor":
        import floor_relay

        upstream = floor_relay.Upstream(base)
        host = f"host: {upstream.host}:{upstream.port}\r\n"
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers())

        async def via_floor() -> Texts:
            out = Texts()
            conn = await upstream.connection()
            reader, writer = conn
            head = f"POST {target} HTTP/1.1\r\n{host}{extra}content-length: {len(body)}\r\n\r\n"
            writer.write(head.encode("latin-1") + body)
            stream = floor_relay.ChatStream()
            while not stream.done:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("upstream closed")
                out.reads += 1
                out.texts += stream.feed(data)
            assert not stream.error, stream.error
            out.usage = stream.usage
            upstream.release(conn)
            return out

        async def close_floor() -> None:
            for _, writer in upstream.idle:
                writer.close()

        return via_floor, close_floor
    if client == "consumer":
        query = dict(p.split("=", 1) for p in target.partition("?")[2].split("&"))
        parts = events(query["stream"])
        pieces = parts if float(query["pace"]) > 0 else [b"".join(parts)]

        async def consume_only() -> Texts:
            out = Texts()
            for piece in pieces:
                out.feed(piece)
            return out

        async def nothing() -> None:
            return None

        return consume_only, nothing
    raise SystemExit(f"unknown client {client!r}")


SOCKET_READS = [0]


def count_socket_reads() -> None:
    """Count the event loop's reads from sockets (the same small cost for every client), to
    show whether the pacing gave each event a read of its own."""
    from asyncio.selector_events import _SelectorSocketTransport

    read_ready = _SelectorSocketTransport._read_ready

    def counted(self: Any) -> None:
        SOCKET_READS[0] += 1
        read_ready(self)

    _SelectorSocketTransport._read_ready = counted  # type: ignore[method-assign]


async def run_calls(client: str, base: str, target: str, calls: int) -> dict[str, Any]:
    count_socket_reads()
    call, close = await make_call(client, base, target, request_body())
    expected = None
    for _ in range(WARMUP):
        expected = "".join((await call()).texts)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    reads, SOCKET_READS[0] = 0, 0
    for _ in range(calls):
        out = await call()
        reads += out.reads
        if "".join(out.texts) != expected or not out.usage:
            raise SystemExit(f"{client}: a call returned other text than the warm-up")
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    await close()
    return {
        "client": client,
        "calls": calls,
        "cpu_ms": cpu / max(calls, 1) * 1000,
        "wall_ms": wall / max(calls, 1) * 1000,
        "pieces": reads / max(calls, 1),
        "reads": SOCKET_READS[0] / max(calls, 1),
        "chars": len(expected or ""),
    }


# -- the driver --------------------------------------------------------------------------------


def upstream_process() -> tuple[subprocess.Popen[str], str]:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream"], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    return child, f"http://127.0.0.1:{int(child.stdout.readline())}"


def child_cmd(client: str, base: str, target: str, calls: int) -> list[str]:
    return [sys.executable, __file__, "--client", client, "--base", base, "--target", target,
            "--calls", str(calls)]  # fmt: skip


def run_child(cmd: list[str]) -> dict[str, Any]:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd[-8:])} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def callgrind_total(cmd: list[str]) -> tuple[int, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        result = run_child(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-line=no", *cmd]
        )
        text = out.read_text(errors="replace")
    match = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
    if not match:
        raise SystemExit("no total in the callgrind output")
    return int(match.group(1)), result


def modes(args: argparse.Namespace, pace_ms: float) -> list[tuple[str, str]]:
    rows = []
    for stream in args.streams:
        for mode in args.modes:
            pace = pace_ms if mode == "paced" else 0
            rows.append((f"{stream}, {mode}", f"{PATH}?stream={stream}&pace={pace:g}"))
    return rows


def measure_cpu(args: argparse.Namespace, base: str) -> None:
    print(f"CPU per call (time.process_time of the client process, every thread), median of "
          f"{args.rounds} interleaved rounds of {args.calls} calls after {WARMUP} warm-up calls; "
          f"ms (min-max of the rounds).")  # fmt: skip
    print()
    for label, target in modes(args, args.pace_ms):
        samples: dict[str, list[dict[str, Any]]] = {c: [] for c in args.clients}
        for r in range(args.rounds):
            order = args.clients[r % len(args.clients) :] + args.clients[: r % len(args.clients)]
            for client in order:
                samples[client].append(run_child(child_cmd(client, base, target, args.calls)))
            print(f"  {label}: round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
        print(f"**{label}** ({samples[args.clients[0]][0]['chars']} characters of text)")
        print()
        print("| client | CPU per call (ms) | range | vs wire | socket reads | wall per call |")
        print("|---|---:|---:|---:|---:|---:|")
        wire = statistics.median(s["cpu_ms"] for s in samples.get("wire", [])) if (
            "wire" in samples) else None  # fmt: skip
        for client in args.clients:
            cpu = [s["cpu_ms"] for s in samples[client]]
            med = statistics.median(cpu)
            ratio = f"{med / wire:.2f}x" if wire else ""
            reads = statistics.median(s["reads"] for s in samples[client])
            walls = statistics.median(s["wall_ms"] for s in samples[client])
            print(f"| {client} | {med:.3f} | {min(cpu):.3f}-{max(cpu):.3f} | {ratio} | "
                  f"{reads:.0f} | {walls:.2f} ms |")  # fmt: skip
        print()


def measure_callgrind(args: argparse.Namespace, base: str) -> None:
    print(f"Instructions per call (valgrind callgrind, the client process, every thread): "
          f"(total with {args.many} calls - total with {args.few}) / {args.many - args.few}; "
          f"paced = {args.callgrind_pace_ms:g} ms between events.")  # fmt: skip
    print()
    for label, target in modes(args, args.callgrind_pace_ms):
        print(f"**{label}**")
        print()
        print("| client | instructions per call | vs wire | over consumer | socket reads |")
        print("|---|---:|---:|---:|---:|")
        per: dict[str, tuple[float, float]] = {}
        for client in args.clients:
            few, _ = callgrind_total(child_cmd(client, base, target, args.few))
            many, result = callgrind_total(child_cmd(client, base, target, args.many))
            per[client] = ((many - few) / (args.many - args.few), result["reads"])
            print(f"  {label}: {client} {per[client][0] / 1e6:.2f} M", file=sys.stderr,
                  flush=True)  # fmt: skip
        wire = per.get("wire", (0.0, 0.0))[0]
        consumer = per.get("consumer", (0.0, 0.0))[0]
        for client in args.clients:
            instr, reads = per[client]
            ratio = f"{instr / wire:.2f}x" if wire else ""
            over = f"{(instr - consumer) / 1e6:.2f} M" if consumer and client != "consumer" else ""
            print(f"| {client} | {instr / 1e6:.2f} M | {ratio} | {over} | {reads:.0f} |")
        print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--base", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=10, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=CLIENTS)
    parser.add_argument("--streams", nargs="+", default=list(STREAMS), choices=list(STREAMS))
    parser.add_argument("--modes", nargs="+", default=["paced", "burst"],
                        choices=["paced", "burst"])  # fmt: skip
    parser.add_argument("--pace-ms", type=float, default=1.0, help="between events, paced")
    parser.add_argument("--callgrind", action="store_true", help="count instructions instead")
    parser.add_argument("--callgrind-pace-ms", type=float, default=20.0)
    parser.add_argument("--few", type=int, default=1, help="callgrind: calls of the short run")
    parser.add_argument("--many", type=int, default=4, help="callgrind: calls of the long run")
    args = parser.parse_args()
    if args.serve_upstream:
        asyncio.run(serve_upstream())
        return 0
    if args.client:
        result = asyncio.run(run_calls(args.client, args.base, args.target, args.calls))
        print(json.dumps(result))
        return 0
    child, base = upstream_process()
    try:
        print("## Upstream clients: CPU per streaming model call (bench/upstream_clients.py)")
        print()
        if args.callgrind:
            measure_callgrind(args, base)
        else:
            measure_cpu(args, base)
    finally:
        child.terminate()
        child.wait(10)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
