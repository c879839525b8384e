"""The LLM boundary: a call prepares exact request bytes once, then streams native events."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec

from .events import DoneEvent, ErrorEvent, ResponseEvent
from .settings import ModelSettings
from .types import RequestMessages, Usage


class StreamEnded(Exception):
    """`recv()` was called after the terminal event was already returned."""


class PreparedRequest(msgspec.Struct, frozen=True):
    """One upstream request, serialized once. A retry resends exactly these bytes.

    Headers carrying credentials are not part of it: the adapter adds them at send time, so a
    stored PreparedRequest never holds a secret.
    """

    url: str
    body: bytes
    model: str  # the upstream model name, recorded on the resulting AssistantMessage
    headers: tuple[tuple[str, str], ...] = ()
    method: str = "POST"


EventSink = Callable[[ResponseEvent], Awaitable[None]]


class StreamProgress(msgspec.Struct, frozen=True):
    """What a stream has shown of its call so far: the provider's latest usage report (all
    zeros when none came: most providers report at the end, Anthropic's `message_start` and
    Gemini's `usageMetadata` early) and the output decoded (characters and delta events of
    text, thinking and tool arguments). It is what the record of a call that ends before its
    terminal event is made of (canceled, superseded, shut down)."""

    usage: Usage = Usage()
    chars: int = 0
    deltas: int = 0


class ResponseStream(Protocol):
    async def recv(self) -> ResponseEvent:
        """The next event. After the terminal (`done` or `error`) event, raises StreamEnded."""
        ...

    def deliver(self, sink: EventSink) -> None:
        """Hand every event to `sink` as it is decoded, instead of `recv` (call it at most
        once, before any `recv`). Each call is awaited before the next event is decoded, the
        terminal event comes last, exactly once, `aclose()` included. A sink must not raise.
        Why: the consumer applies each event in the task that read it, with no queue and no
        task of its own between the socket and the client."""
        ...

    async def aclose(self) -> None:
        """Abort at once: the upstream connection is dropped (never returned to a pool or
        drained), even while a sink holds an event. A stream not yet terminated then yields
        `error` with reason aborted."""
        ...

    def progress(self) -> StreamProgress:
        """What the call has shown so far (any time, before or after its end)."""
        ...


class LLM(Protocol):
    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest: ...

    def send(self, prepared: PreparedRequest) -> ResponseStream: ...

    def call(self, request: RequestMessages, settings: ModelSettings) -> ResponseStream:
        """`send(prepare(request, settings))`."""
        ...


def deliver_by_task(stream: ResponseStream, sink: EventSink) -> asyncio.Task[None]:
    """`deliver` for a stream that only knows `recv`: a task reads it and awaits `sink`."""

    async def read() -> None:
        while True:
            event = await stream.recv()
            await sink(event)
            if isinstance(event, DoneEvent | ErrorEvent):
                return

    return asyncio.get_running_loop().create_task(read())
