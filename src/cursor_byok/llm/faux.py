"""A scripted LLM for tests: replays canned responses as native event streams.

Responses are consumed one per call, in order. Each is streamed through a `MessageAssembler`, so
events carry real content indices and a live `partial`, exactly like a provider adapter's. Text,
thinking and tool-call arguments are cut into deltas of `chunk_size` characters; `delay` seconds
pass before each event. Every request is recorded (messages, settings and prepared bytes).

    llm = FauxLLM([FauxResponse.tool_calls([("Read", {"path": "a.py"})]), FauxResponse.text("ok")])
    stream = llm.call(request, ModelSettings(model="m"))
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import msgspec

from .assembler import MessageAssembler
from .canonical import decode_request, encode_request
from .events import ErrorEvent, ResponseEvent, is_terminal
from .settings import ModelSettings
from .stream import EventSink, PreparedRequest, StreamEnded, StreamProgress, deliver_by_task
from .types import (
    AssistantContent,
    AssistantMessage,
    DoneReason,
    ErrorReason,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
)

API = "faux"
SETTINGS_HEADER = "x-faux-settings"

_json = msgspec.json.Encoder(order="deterministic")
_settings_decoder = msgspec.json.Decoder(ModelSettings)


@dataclass(frozen=True, slots=True)
class FauxResponse:
    """One scripted answer. Build it with the class methods."""

    content: tuple[AssistantContent, ...] = ()
    stop_reason: DoneReason | None = None  # None: toolUse if there are tool calls, else stop
    error_text: str | None = None  # set: the stream ends in an `error` event with this text
    error_reason: ErrorReason = "error"
    started: bool = True  # for errors: False gives a lone `error` (request failed before start)
    events: tuple[ResponseEvent, ...] | None = None  # raw events, replayed as they are
    usage: Usage = field(default_factory=Usage)
    response_id: str | None = None
    http_status: int | None = None
    transient: bool = False

    @classmethod
    def text(
        cls,
        text: str,
        *,
        thinking: str | None = None,
        stop_reason: DoneReason = "stop",
        usage: Usage | None = None,
    ) -> FauxResponse:
        content: list[AssistantContent] = []
        if thinking is not None:
            content.append(ThinkingContent(thinking=thinking))
        content.append(TextContent(text=text))
        return cls(content=tuple(content), stop_reason=stop_reason, usage=usage or Usage())

    @classmethod
    def tool_calls(
        cls,
        calls: Sequence[ToolCall | tuple[str, dict[str, Any]]],
        *,
        text: str | None = None,
        thinking: str | None = None,
        stop_reason: DoneReason = "toolUse",
    ) -> FauxResponse:
        """Tool calls, optionally after some thinking and text. A `(name, arguments)` pair gets
        the id `call_{n}_{i}` (n = the LLM call number, i = its position). A ToolCall with
        `raw_arguments` streams that text verbatim (use it for invalid JSON)."""
        content: list[AssistantContent] = []
        if thinking is not None:
            content.append(ThinkingContent(thinking=thinking))
        if text is not None:
            content.append(TextContent(text=text))
        for call in calls:
            if isinstance(call, ToolCall):
                content.append(call)
            else:
                name, arguments = call
                content.append(ToolCall(id="", name=name, arguments=arguments))
        return cls(content=tuple(content), stop_reason=stop_reason)

    @classmethod
    def error(
        cls,
        message: str,
        *,
        reason: ErrorReason = "error",
        text: str = "",
        started: bool = True,
        http_status: int | None = None,
        transient: bool = False,
    ) -> FauxResponse:
        """A failing response: `start`, the given text streamed, then `error`; with
        `started=False` a lone `error`, as when the request fails before the provider answers."""
        content = (TextContent(text=text),) if text else ()
        return cls(
            content=content,
            error_text=message,
            error_reason=reason,
            started=started,
            http_status=http_status,
            transient=transient,
        )

    @classmethod
    def message(cls, message: AssistantMessage) -> FauxResponse:
        """Replay the content and stop reason of an existing message."""
        stop: DoneReason = "stop"
        if message.stop_reason == "length" or message.stop_reason == "toolUse":
            stop = message.stop_reason
        return cls(content=message.content, stop_reason=stop, usage=message.usage)

    @classmethod
    def raw(cls, events: Iterable[ResponseEvent]) -> FauxResponse:
        return cls(events=tuple(events))


ScriptEntry: TypeAlias = FauxResponse | Callable[[RequestMessages], FauxResponse]


@dataclass(frozen=True, slots=True)
class FauxCall:
    """One request the fake received."""

    request: RequestMessages
    settings: ModelSettings
    prepared: PreparedRequest


def _chunks(text: str, size: int) -> Iterator[str]:
    for i in range(0, len(text), size):
        yield text[i : i + size]


def _lone_error(text: str, model: str, provider: str) -> ErrorEvent:
    return ErrorEvent(
        reason="error",
        message=AssistantMessage(
            content=(),
            api=API,
            provider=provider,
            model=model,
            stop_reason="error",
            error_message=text,
        ),
    )


def _replay(
    response: FauxResponse, asm: MessageAssembler, chunk_size: int, call_number: int
) -> Iterator[ResponseEvent]:
    if response.events is not None:
        yield from response.events
        return
    if response.error_text is not None and not response.started:
        yield asm.fail(
            response.error_text,
            reason=response.error_reason,
            http_status=response.http_status,
            transient=response.transient,
        )
        return
    yield asm.start()
    asm.set_usage(response.usage)
    asm.set_response_id(response.response_id)
    tool_index = 0
    for block in response.content:
        if isinstance(block, TextContent):
            index, opened = asm.open_text()
            yield opened
            for piece in _chunks(block.text, chunk_size):
                yield asm.text_delta(index, piece)
            yield asm.close_text(index, signature=block.signature)
        elif isinstance(block, ThinkingContent):
            index, opened_thinking = asm.open_thinking(redacted=block.redacted)
            yield opened_thinking
            for piece in _chunks(block.thinking, chunk_size):
                yield asm.thinking_delta(index, piece)
            yield asm.close_thinking(index, signature=block.signature)
        else:
            call_id = block.id or f"call_{call_number}_{tool_index}"
            tool_index += 1
            index, opened_call = asm.open_tool_call(
                call_id, block.name, thought_signature=block.thought_signature
            )
            yield opened_call
            raw = block.raw_arguments
            if raw is None:
                raw = _json.encode(block.arguments).decode() if block.arguments else ""
            for piece in _chunks(raw, chunk_size):
                yield asm.tool_call_delta(index, piece)
            yield asm.close_tool_call(index)
    if response.error_text is not None:
        yield asm.fail(
            response.error_text,
            reason=response.error_reason,
            http_status=response.http_status,
            transient=response.transient,
        )
        return
    reason = response.stop_reason
    if reason is None:
        reason = "toolUse" if asm.has_tool_calls() else "stop"
    yield asm.done(reason)


class FauxStream:
    """A `ResponseStream` over a scripted event iterator."""

    def __init__(
        self,
        events: Iterator[ResponseEvent],
        assembler: MessageAssembler,
        *,
        delay: float = 0.0,
    ) -> None:
        self._events = events
        self._asm = assembler
        self._delay = delay
        self._ended = False
        self._aborted = False
        self._abort_signal: asyncio.Event | None = None
        self._reader: asyncio.Task[None] | None = None
        self.received: list[ResponseEvent] = []

    async def recv(self) -> ResponseEvent:
        if self._ended:
            raise StreamEnded()
        if not self._aborted:
            await self._pause()
        if self._aborted:
            return self._finish(self._aborted_event())
        event = next(self._events, None)
        if event is None:
            event = _lone_error(
                "faux LLM: the scripted events ended without a terminal event",
                self._asm.model,
                self._asm.provider,
            )
        return self._finish(event)

    def deliver(self, sink: EventSink) -> None:
        self._reader = deliver_by_task(self, sink)

    def progress(self) -> StreamProgress:
        return self._asm.progress()

    async def aclose(self) -> None:
        if self._ended:
            return
        self._aborted = True
        if self._abort_signal is not None:
            self._abort_signal.set()

    def _finish(self, event: ResponseEvent) -> ResponseEvent:
        if is_terminal(event):
            self._ended = True
        self.received.append(event)
        return event

    def _aborted_event(self) -> ErrorEvent:
        if self._asm.started and not self._asm.terminated:
            return self._asm.fail("aborted", reason="aborted")
        event = _lone_error("aborted", self._asm.model, self._asm.provider)
        return msgspec.structs.replace(event, reason="aborted")

    async def _pause(self) -> None:
        if self._delay <= 0:
            await asyncio.sleep(0)
            return
        if self._abort_signal is None:
            self._abort_signal = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._abort_signal.wait(), self._delay)


class FauxLLM:
    """An `LLM` that answers from a script. `calls` records every request received."""

    api = API

    def __init__(
        self,
        script: Iterable[ScriptEntry] = (),
        *,
        chunk_size: int = 3,
        delay: float = 0.0,
        provider: str = "faux",
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self._script: deque[ScriptEntry] = deque(script)
        self.chunk_size = chunk_size
        self.delay = delay
        self.provider = provider
        self.calls: list[FauxCall] = []
        self.streams: list[FauxStream] = []

    def add(self, *responses: ScriptEntry) -> None:
        self._script.extend(responses)

    @property
    def remaining(self) -> int:
        return len(self._script)

    @property
    def requests(self) -> list[RequestMessages]:
        return [c.request for c in self.calls]

    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest:
        return PreparedRequest(
            url="faux://llm",
            body=encode_request(request),
            model=settings.model,
            headers=((SETTINGS_HEADER, _json.encode(settings).decode()),),
        )

    def send(self, prepared: PreparedRequest) -> FauxStream:
        request = decode_request(prepared.body)
        header = dict(prepared.headers).get(SETTINGS_HEADER)
        settings = (
            _settings_decoder.decode(header) if header else ModelSettings(model=prepared.model)
        )
        self.calls.append(FauxCall(request=request, settings=settings, prepared=prepared))
        number = len(self.calls)
        asm = MessageAssembler(api=API, provider=self.provider, model=prepared.model)
        events: Iterator[ResponseEvent]
        if not self._script:
            events = iter(
                (
                    _lone_error(
                        f"faux LLM: no scripted response left for call #{number}",
                        prepared.model,
                        self.provider,
                    ),
                )
            )
        else:
            entry = self._script.popleft()
            response = entry if isinstance(entry, FauxResponse) else entry(request)
            events = _replay(response, asm, self.chunk_size, number)
        stream = FauxStream(events, asm, delay=self.delay)
        self.streams.append(stream)
        return stream

    def call(self, request: RequestMessages, settings: ModelSettings) -> FauxStream:
        return self.send(self.prepare(request, settings))


def script_events(
    response: FauxResponse,
    *,
    chunk_size: int = 3,
    call_number: int = 1,
    model: str = "faux-model",
    provider: str = "faux",
) -> list[ResponseEvent]:
    """The events one response streams, all at once (for synchronous tests). The events share
    one live `partial`, as a real stream's do."""
    asm = MessageAssembler(api=API, provider=provider, model=model)
    return list(_replay(response, asm, chunk_size, call_number))
