"""The LLM boundary: a call prepares exact request bytes once, then streams native events."""

from __future__ import annotations

from typing import Protocol

import msgspec

from .events import ResponseEvent
from .settings import ModelSettings
from .types import RequestMessages


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


class ResponseStream(Protocol):
    async def recv(self) -> ResponseEvent:
        """The next event. After the terminal (`done` or `error`) event, raises StreamEnded."""
        ...

    async def aclose(self) -> None:
        """Abort at once. A stream not yet terminated then yields `error` with reason aborted."""
        ...


class LLM(Protocol):
    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest: ...

    def send(self, prepared: PreparedRequest) -> ResponseStream: ...

    def call(self, request: RequestMessages, settings: ModelSettings) -> ResponseStream:
        """`send(prepare(request, settings))`."""
        ...
