"""The floor for our server's per-turn overhead: the thinnest relay a Cursor client can use for
one text turn, on the same stack (granian, RSGI, one worker, HTTP/2 prior knowledge or
HTTP/1.1 on one port).

    .venv/bin/python bench/floor_relay.py --port P [--upstream URL] [--max-streams 1000]

`POST /agent.v1.AgentService/Run` (Connect bidi streaming, application/connect+proto): the
response headers and an opening heartbeat, the first request envelope read and decoded
(`AgentClientMessage`, upb), ONE streamed Chat Completions request to the upstream over a
keep-alive HTTP/1.1 connection taken from a small per-process pool (raw asyncio streams, no
HTTP client library), the SSE parsed by hand; every upstream read becomes one `send_bytes`
holding that read's text deltas (`interaction_update.text_delta`), and the read that ends the
response also carries `interaction_update.turn_ended` (with the usage) and the Connect
end-stream frame. Letting go of the response transport ends the HTTP/2 stream. `GET /healthz`
answers 200.

No store, no loop, no context, no checkpoint, no heartbeats after the first, no tools: what is
left is the work every relay has to do. bench/relay_overhead.py and bench/relay_concurrency.py
start it. Without `--port` (as `bench/run` runs it) it checks itself instead: a scripted
upstream, the relay as a child process, a few turns whose text must equal the upstream's
direct answer, then 100 timed turns with the Node client; a markdown section on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

try:  # where the generated classes are after the refactor of src/, and before it
    from cursor_byok.transport.cursor.proto import agent_pb2
except ImportError:
    from cursor_byok.transport.proto import agent_pb2  # type: ignore[no-redef]

RUN_PATH = "/agent.v1.AgentService/Run"
CONNECT_PROTO = "application/connect+proto"
SYSTEM = "You are a coding agent."  # the direct path of the benchmarks sends the same
UPSTREAM_MODEL = "brain-1"  # one model: the requested id is read, not routed
MAX_IDLE = 32  # keep-alive upstream connections kept between turns
END_STREAM = b"\x02\x00\x00\x00\x02{}"  # Connect end-stream frame, no error

_json_encode = msgspec.json.encode
_json_decode = msgspec.json.decode


def envelope(message: agent_pb2.AgentServerMessage) -> bytes:
    payload = message.SerializeToString()
    return b"\0" + len(payload).to_bytes(4, "big") + payload


def _update(**kind: Any) -> agent_pb2.AgentServerMessage:
    return agent_pb2.AgentServerMessage(interaction_update=agent_pb2.InteractionUpdate(**kind))


HEARTBEAT = envelope(_update(heartbeat=agent_pb2.HeartbeatUpdate()))


def text_delta(text: str) -> bytes:
    return envelope(_update(text_delta=agent_pb2.TextDeltaUpdate(text=text)))


def turn_ended(usage: dict[str, Any]) -> bytes:
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    ended = agent_pb2.TurnEndedUpdate(
        input_tokens=prompt - cached,
        output_tokens=int(usage.get("completion_tokens") or 0),
        cache_read_tokens=cached,
    )
    return envelope(_update(turn_ended=ended))


def end_stream_error(message: str) -> bytes:
    payload = _json_encode({"error": {"code": "unavailable", "message": message}})
    return b"\x02" + len(payload).to_bytes(4, "big") + payload


# -- the upstream: keep-alive HTTP/1.1, chunked SSE parsed by hand ---------------------------


class Upstream:
    """Connections to one OpenAI-compatible upstream, reused turn after turn."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path.rstrip("/") + "/v1/chat/completions"
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while self.idle:
            reader, writer = self.idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        return await asyncio.open_connection(self.host, self.port)  # TCP_NODELAY is asyncio's

    def release(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        if len(self.idle) < MAX_IDLE:
            self.idle.append(conn)
        else:
            conn[1].close()

    def request(self, prompt: str) -> bytes:
        body = _json_encode(
            {
                "model": UPSTREAM_MODEL,
                "stream": True,
                "stream_options": {"include_usage": True},
                "messages": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": prompt},
                ],
            }
        )
        head = (
            f"POST {self.path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"content-type: application/json\r\naccept: text/event-stream\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        return head.encode("latin-1") + body


class ChatStream:
    """One chunked `text/event-stream` response, fed socket read by socket read."""

    def __init__(self) -> None:
        self.status = 0  # 0 until the head is in
        self.raw = bytearray()  # bytes not yet de-chunked
        self.sse = bytearray()  # de-chunked bytes not yet split into lines
        self.usage: dict[str, Any] = {}
        self.done = False  # the terminating chunk arrived
        self.error = ""

    def feed(self, data: bytes) -> list[str]:
        """The text deltas in `data` (and what came before it, unparsed)."""
        raw = self.raw
        raw += data
        if not self.status:
            end = raw.find(b"\r\n\r\n")
            if end < 0:
                return []
            head = bytes(raw[:end]).decode("latin-1").lower()
            self.status = int(head.split(" ", 2)[1])
            del raw[: end + 4]
            if self.status != 200 or "transfer-encoding: chunked" not in head:
                self.error = f"upstream answered {self.status}"
                self.done = True
                return []
        while True:  # de-chunk what is complete
            line = raw.find(b"\r\n")
            if line < 0:
                break
            size = int(raw[:line], 16)
            if len(raw) < line + 4 + size:
                break
            if size == 0:
                self.done = True
                del raw[: line + 4]
                break
            self.sse += raw[line + 2 : line + 2 + size]
            del raw[: line + 4 + size]
        texts: list[str] = []
        sse = self.sse
        while (newline := sse.find(b"\n")) >= 0:
            line_bytes = bytes(sse[:newline]).rstrip(b"\r")
            del sse[: newline + 1]
            if not line_bytes.startswith(b"data: ") or line_bytes == b"data: [DONE]":
                continue
            chunk = _json_decode(line_bytes[6:])
            for choice in chunk.get("choices") or ():
                content = (choice.get("delta") or {}).get("content")
                if content:
                    texts.append(content)
            if chunk.get("usage"):
                self.usage = chunk["usage"]
        return texts


# -- the RSGI application ---------------------------------------------------------------------


class Relay:
    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return
        if scope.path == "/healthz":
            proto.response_bytes(200, [("content-type", "text/plain")], b"ok\n")
            return
        if scope.method != "POST" or scope.path != RUN_PATH:
            proto.response_bytes(404, [("content-type", "text/plain")], b"not found\n")
            return
        body = aiter(proto)
        pending = anext(body)  # asked for at once: granian hands it over from its own thread
        out = proto.response_stream(200, [("content-type", CONNECT_PROTO)])
        await out.send_bytes(HEARTBEAT)
        first = bytearray()
        while True:
            try:
                first += await pending
            except Exception:  # StopAsyncIteration too: gone before its first message
                return
            size = int.from_bytes(first[1:5], "big") if len(first) >= 5 else -1
            if 0 <= size <= len(first) - 5:
                break
            pending = anext(body)
        message = agent_pb2.AgentClientMessage.FromString(bytes(first[5 : 5 + size]))
        run = message.run_request
        _ = run.requested_model.model_id  # one model here; our server routes by it
        await self.turn(run.action.user_message_action.user_message.text, out)
        # The stream ends when granian's transport is freed: returning drops the last reference.

    async def turn(self, prompt: str, out: Any) -> None:
        try:
            conn = await self.upstream.connection()
        except OSError as exc:
            await out.send_bytes(end_stream_error(f"upstream unreachable: {exc}"))
            return
        reader, writer = conn
        kept = False
        try:
            writer.write(self.upstream.request(prompt))
            stream = ChatStream()
            while not stream.done:
                data = await reader.read(65536)
                if not data:
                    await out.send_bytes(end_stream_error("upstream closed the connection"))
                    return
                frames = b"".join([text_delta(text) for text in stream.feed(data)])
                if stream.error:
                    await out.send_bytes(frames + end_stream_error(stream.error))
                    return
                if stream.done:
                    self.upstream.release(conn)
                    kept = True
                    frames += turn_ended(stream.usage) + END_STREAM
                if frames:
                    await out.send_bytes(frames)
        finally:
            if not kept:  # an error, or the client left mid-answer: the connection is spent
                writer.close()


# -- serving ----------------------------------------------------------------------------------


async def serve(host: str, port: int, upstream: str, max_streams: int) -> None:
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP2Settings
    from granian.server.embed import Server

    server = Server(
        Relay(Upstream(upstream)),
        address=host,
        port=port,
        interface=Interfaces.RSGI,
        http=HTTPModes.auto,
        backlog=4096,  # as our server; granian derives its backpressure (4096) from it
        http2_settings=HTTP2Settings(max_concurrent_streams=max_streams),
        log_enabled=False,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.stop)
    await server.serve()


def self_check(turns: int = 100) -> int:
    """The relay against the scripted upstream, checked and timed (see the docstring)."""
    import statistics

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "bench"))
    import _relay
    import server_overhead as so

    if not so.node_available():
        print("the self-check needs node", file=sys.stderr)
        return 2
    with so.upstream_process() as (upstream_url, _), _relay.relay(upstream_url) as relay:
        problem = _relay.check_same_text(relay.port, upstream_url)
        cpu0 = so.cpu_seconds(relay.pid)
        via, direct = so.node_turns(relay.port, upstream_url, turns)
        cpu = (so.cpu_seconds(relay.pid) - cpu0) / (turns + 5) * 1000

    def over(key: str) -> float:
        return (
            statistics.median(getattr(t, key) for t in via)
            - statistics.median(getattr(t, key) for t in direct)
        ) * 1000

    print("## The floor relay (bench/floor_relay.py), checked")
    print()
    print("| check | result |")
    print("|---|---|")
    print(f"| same text as the upstream's direct answer (8 turns) | {problem or 'yes'} |")
    print(f"| first text delta over direct, median of {turns} turns | {over('ttft'):+.2f} ms |")
    print(f"| whole turn over direct | {over('total'):+.2f} ms |")
    print(f"| relay CPU per turn (utime + stime) | {cpu:.2f} ms |")
    print()
    print("bench/relay_overhead.py and bench/relay_concurrency.py compare our server with it.")
    return 1 if problem else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="serve on this port (without: a self-check)")
    parser.add_argument(
        "--upstream",
        default=os.environ.get("FLOOR_RELAY_UPSTREAM", ""),
        help="the upstream's base URL (default: $FLOOR_RELAY_UPSTREAM)",
    )
    parser.add_argument(
        "--max-streams",
        type=int,
        default=1000,
        help="HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS per connection (granian's default: 200)",
    )
    args = parser.parse_args(argv)
    if args.port is None:
        return self_check()
    if not args.upstream:
        parser.error("--upstream URL (or FLOOR_RELAY_UPSTREAM) is required")
    asyncio.run(serve(args.host, args.port, args.upstream, args.max_streams))
    # granian's runtime threads may still be dropping objects: leave without finalizing
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
