"""A slow streaming provider over real HTTP/1.1 on loopback, that watches its client.

Each request is answered with a chunked SSE body, one event every `interval_s`, for as long
as the script has events, while the server reads its socket at the same time: the moment the
client closes the connection (FIN or reset), `closed_at` is noted and nothing more is written.
Every chunk it wrote is kept with the time it went out, so a test can say how many chunks and
bytes the provider sent after a cancel, and how long after it the connection closed: what a
real provider bills for, and whether it was told to stop. Times are `time.monotonic()` of
this process (the server runs on a thread of the test process, `threaded()`).

Scripts: `openai_chat_events` (no usage until the end, as OpenAI and llama.cpp stream),
`anthropic_events` (input tokens in `message_start`), `gemini_events` (usage in every chunk).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

from .upstream import Received, _read_request


@dataclass
class Exchange:
    """One request and what the server did with it."""

    request: Received
    opened_at: float
    sent: list[tuple[float, int]] = field(default_factory=list)  # (time, bytes) per chunk
    closed_at: float | None = None  # when the client closed the connection
    completed: bool = False  # the whole script went out

    def sent_after(self, t: float) -> tuple[int, int]:
        """Chunks and bytes written after time `t`."""
        late = [n for at, n in self.sent if at > t]
        return len(late), sum(late)

    @property
    def chunks(self) -> int:
        return len(self.sent)


Script = Callable[[Received], list[bytes]]


class StreamingUpstream:
    """The server; `start()` on the loop it will run on (see `threaded()` for a thread)."""

    def __init__(self, script: Script, *, interval_s: float = 0.02) -> None:
        self.script = script
        self.interval_s = interval_s
        self.exchanges: list[Exchange] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._changed = threading.Condition()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> StreamingUpstream:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def wait_for(self, cond: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Block (any thread) until `cond()` holds for what the server saw; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not cond():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.05))
        return True

    async def until(self, cond: Callable[[], bool], timeout: float = 10.0) -> bool:
        """`wait_for` from a coroutine, without blocking its loop."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    def _note(self) -> None:
        with self._changed:
            self._changed.notify_all()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        try:
            received = await _read_request(reader)
            if received is None:
                return
            exchange = Exchange(received, time.monotonic())
            self.exchanges.append(exchange)
            self._note()
            await self._stream(reader, writer, exchange, self.script(received))
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        exchange: Exchange,
        events: list[bytes],
    ) -> None:
        closed = asyncio.Event()

        async def watch() -> None:
            # A client sends nothing after its request: any read that returns is its close.
            with contextlib.suppress(ConnectionError, OSError):
                while await reader.read(4096):
                    pass
            exchange.closed_at = time.monotonic()
            closed.set()
            self._note()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            head = (
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                "transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            )
            writer.write(head.encode())
            await writer.drain()
            for event in events:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(closed.wait(), self.interval_s)
                if closed.is_set():
                    return
                writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                exchange.sent.append((time.monotonic(), len(event)))
                self._note()
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            exchange.completed = True
            self._note()
        except (ConnectionError, OSError, TimeoutError):
            if exchange.closed_at is None:
                exchange.closed_at = time.monotonic()
                self._note()
        finally:
            watcher.cancel()


@contextlib.contextmanager
def threaded(script: Script, *, interval_s: float = 0.02) -> Iterator[StreamingUpstream]:
    """The server on an event loop of its own thread (for a server process to call)."""
    up = StreamingUpstream(script, interval_s=interval_s)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(up.start(), loop).result(10)
    try:
        yield up
    finally:
        asyncio.run_coroutine_threadsafe(up.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if not thread.is_alive():
            loop.close()


@contextlib.asynccontextmanager
async def running(script: Script, *, interval_s: float = 0.02) -> AsyncIterator[StreamingUpstream]:
    """The server on the caller's loop."""
    up = await StreamingUpstream(script, interval_s=interval_s).start()
    try:
        yield up
    finally:
        await up.stop()


# -- scripts -----------------------------------------------------------------------------------


def _sse(payload: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(payload)}\n\n".encode()


def openai_chat_events(
    tokens: int, *, word: str = "tok ", prompt_tokens: int = 900, model: str = "slow-1"
) -> list[bytes]:
    """A Chat Completions stream of `tokens` deltas; its usage comes only in the last chunk."""

    def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
        return _sse(
            {
                "id": "chatcmpl-slow",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": word}) for _ in range(tokens)]
    out.append(chunk({}, "stop"))
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens}
    out.append(_sse({"id": "chatcmpl-slow", "model": model, "choices": [], "usage": usage}))
    out.append(b"data: [DONE]\n\n")
    return out


def anthropic_events(tokens: int, *, word: str = "tok ", input_tokens: int = 1234) -> list[bytes]:
    """A Messages stream: `message_start` reports the input tokens (and output 1), then
    `tokens` text deltas; the final output count comes in `message_delta` at the end."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_slow",
            "type": "message",
            "role": "assistant",
            "model": "claude-slow",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1},
        },
    }
    out = [_sse(start, "message_start")]
    block = {"type": "text", "text": ""}
    out.append(
        _sse(
            {"type": "content_block_start", "index": 0, "content_block": block},
            "content_block_start",
        )
    )
    delta = {"type": "content_block_delta", "index": 0}
    for _ in range(tokens):
        out.append(
            _sse({**delta, "delta": {"type": "text_delta", "text": word}}, "content_block_delta")
        )
    out.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": tokens},
    }
    out.append(_sse(end, "message_delta"))
    out.append(_sse({"type": "message_stop"}, "message_stop"))
    return out


def gemini_events(tokens: int, *, word: str = "tok ", prompt_tokens: int = 777) -> list[bytes]:
    """A streamGenerateContent stream: every chunk carries the usage so far."""
    out = []
    for i in range(tokens):
        out.append(
            _sse(
                {
                    "candidates": [{"content": {"role": "model", "parts": [{"text": word}]}}],
                    "usageMetadata": {
                        "promptTokenCount": prompt_tokens,
                        "candidatesTokenCount": i + 1,
                        "totalTokenCount": prompt_tokens + i + 1,
                    },
                    "modelVersion": "gemini-slow",
                }
            )
        )
    out.append(
        _sse(
            {
                "candidates": [
                    {"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP"}
                ],
                "usageMetadata": {
                    "promptTokenCount": prompt_tokens,
                    "candidatesTokenCount": tokens,
                    "totalTokenCount": prompt_tokens + tokens,
                },
            }
        )
    )
    return out
