"""A scripted fake LLM upstream over real HTTP/1.1 on loopback.

Tests script responses per request (status, headers, body chunks with delays) and read back
every request exactly as it arrived (method, path, headers, body bytes). It speaks plain
HTTP/1.1 with chunked responses, so clients see real sockets, real streaming and real
disconnects. `closed_early` tells whether the client hung up before the response finished.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

from tests.paths import PROVIDER_FIXTURES


def fixture_bytes(api_dir: str, name: str) -> bytes:
    """A recorded provider stream from tests/fixtures/providers/<api_dir>/<name>."""
    return (PROVIDER_FIXTURES / api_dir / name).read_bytes()


@dataclass
class Reply:
    status: int = 200
    headers: list[tuple[str, str]] = field(
        default_factory=lambda: [("content-type", "text/event-stream")]
    )
    chunks: list[bytes] = field(default_factory=list)
    delay_s: float = 0.0  # before each chunk
    hang_after: bool = False  # keep the connection open after the chunks, never finish

    @classmethod
    def sse(cls, body: bytes, *, chunk_size: int = 0, delay_s: float = 0.0) -> Reply:
        """Stream `body` split at SSE event boundaries (or fixed-size chunks)."""
        if chunk_size:
            chunks = [body[i : i + chunk_size] for i in range(0, len(body), chunk_size)]
        else:
            norm = body.replace(b"\r\n", b"\n")
            chunks = [part + b"\n\n" for part in norm.split(b"\n\n") if part.strip()]
        return cls(chunks=chunks, delay_s=delay_s)

    @classmethod
    def events(cls, payloads: Iterable[str], *, delay_s: float = 0.0) -> Reply:
        """One `data:` event per payload (already-serialized JSON or a literal like [DONE])."""
        return cls(chunks=[f"data: {p}\n\n".encode() for p in payloads], delay_s=delay_s)

    @classmethod
    def json(cls, status: int, body: str, headers: list[tuple[str, str]] | None = None) -> Reply:
        return cls(
            status=status,
            headers=[("content-type", "application/json"), *(headers or [])],
            chunks=[body.encode()],
        )


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


ReplyFactory = Callable[[Received], Reply]


class FakeUpstream:
    def __init__(self, default: ReplyFactory | None = None) -> None:
        self.default = default  # answers requests once the script is empty
        self.requests: list[Received] = []
        self.closed_early: list[bool] = []
        self._script: deque[Reply | ReplyFactory] = deque()
        self._server: asyncio.Server | None = None
        self.port = 0
        self.connections = 0
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def push(self, *replies: Reply | ReplyFactory) -> None:
        self._script.extend(replies)

    async def start(self) -> FakeUpstream:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            # Connections still open (a reply that hangs, a client that never hung up) are
            # ended here, not when their loop is gone: that left coroutines to be closed by
            # the garbage collector on a closed loop ("Event loop is closed" warnings).
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        try:
            while True:
                received = await _read_request(reader)
                if received is None:
                    return
                self.requests.append(received)
                if self._script:
                    item: Reply | ReplyFactory = self._script.popleft()
                elif self.default is not None:
                    item = self.default
                else:
                    item = Reply.json(
                        500, '{"error":{"message":"fake upstream: no scripted reply"}}'
                    )
                reply = item(received) if callable(item) else item
                ok = await _write_reply(reader, writer, reply)
                self.closed_early.append(not ok)
                if not ok or reply.hang_after:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> Received | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    body = b""
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readline()).strip(), 16)
            if size == 0:
                await reader.readline()
                break
            parts.append(await reader.readexactly(size))
            await reader.readline()
        body = b"".join(parts)
    return Received(method=method, path=path, headers=headers, body=body)


async def _write_reply(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: Reply
) -> bool:
    """Returns False when the client went away before the reply was complete."""
    reason = {
        200: "OK",
        400: "Bad Request",
        401: "Unauthorized",
        429: "Too Many Requests",
        500: "Internal Server Error",
        503: "Service Unavailable",
        529: "Overloaded",
    }.get(reply.status, "X")
    head = [f"HTTP/1.1 {reply.status} {reason}", "transfer-encoding: chunked"]
    head += [f"{k}: {v}" for k, v in reply.headers]
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        for chunk in reply.chunks:
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            if not chunk:
                continue
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            await writer.drain()
        if reply.hang_after:
            # A stalled upstream: stay open until the client disconnects.
            with contextlib.suppress(ConnectionError):
                while await reader.read(4096):
                    pass
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True
    except ConnectionError:
        return False


@contextlib.asynccontextmanager
async def fake_upstream() -> AsyncIterator[FakeUpstream]:
    server = await FakeUpstream().start()
    try:
        yield server
    finally:
        await server.stop()
