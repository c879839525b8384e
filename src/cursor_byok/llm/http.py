"""The HTTP half shared by every provider adapter: send prepared bytes, stream SSE, map failures.

An adapter supplies three pure pieces: `prepare` (request -> exact bytes), `auth_headers` (added
at send time so stored requests hold no secret) and a `StreamDecoder` (SSE events -> native
events through a `MessageAssembler`). This module owns the socket: after a 2xx it emits `start`
with the first content event (a call that fails before any content is a lone `error`: nothing
was output, so it may be retried or failed over), turns HTTP errors, timeouts, broken
connections, undecodable streams and missed output deadlines (llm/deadlines.py) into one
`error` event, and aborts the request at once on `aclose()`: the connection is dropped there
and then (not returned to the pool, not drained), even while a sink holds an event, so the
provider stops generating what nobody will read.

Reading runs in its own task, so `aclose()` from any task cancels the read immediately instead
of waiting for the next chunk. That task feeds a queue for `recv`, or awaits the consumer's sink
directly (`deliver`): then the event a chunk brings is applied, and usually written to the
client, within the step that read the chunk.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import msgspec

from .assembler import MessageAssembler
from .deadlines import Deadline, OutputWatch, missed
from .events import (
    ContextLimit,
    DoneEvent,
    ErrorEvent,
    ErrorKind,
    ResponseEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
)
from .settings import ModelSettings, ProviderSettings
from .sse import SSEEvent, SSEParser
from .stream import EventSink, PreparedRequest, StreamEnded, StreamProgress
from .types import RequestMessages
from .upstream import ConnectionReset, ConnectTimeout, Upstream, UpstreamError, UpstreamTimeout

log = logging.getLogger("cursor_byok.llm")

MAX_ERROR_BODY = 64 * 1024
# The longest stretch of decoding without giving the loop a turn (other runs wait meanwhile).
YIELD_EVERY_S = 0.0005
# A read that took this long waited for the socket: the loop ran other work meanwhile.
WAITED_S = 0.00005
# Loop turns given at the first content event when a consumer `recv`s: enough for the token to
# cross every task between the socket and the client (this reader, the consumer of `recv`,
# the transport's writer). A sink needs none: it has the event written already.
FIRST_CONTENT_YIELDS = 4
CONTENT_EVENTS = (TextDelta, ThinkingDelta, ToolCallStart, ToolCallDelta)
# What lets the events held before the first content go (see `_before_output`); past this many
# held events they go anyway, so a provider sending empty blocks cannot fill memory.
_RELEASING = (*CONTENT_EVENTS, DoneEvent)
MAX_HELD_EVENTS = 256


class StreamDecoder(Protocol):
    """Sans-I/O translation of one provider stream. Returns events, the last one terminal."""

    def feed(self, event: SSEEvent) -> list[ResponseEvent]: ...

    def finish(self) -> list[ResponseEvent]:
        """The provider closed the stream. Must return a terminal event if none was returned:
        a stream without its end marker is an error, never a silent success."""
        ...


# Sees each SSE event of a call before its decoder; must not raise (a raise ends the call as
# an undecodable stream).
SSEObserver = Callable[[SSEEvent], None]


def redact(text: str, secrets: Sequence[str | None]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> int | None:
    """Milliseconds the provider asked us to wait (`retry-after-ms`, then `retry-after`)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0, int(float(ms)))
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0, int(float(value) * 1000))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0, int((when - (now if now is not None else time.time())) * 1000))


def not_followed(status: int, headers: Mapping[str, str]) -> str:
    """Why a 3xx (or an interim status a client passed on) ends the call. Redirects are not
    followed: the prompt and the key would go wherever the answer points."""
    if not 300 <= status < 400:
        return "an unexpected non-final status"
    location = headers.get("location")
    where = f"redirected to {location[:300]}" if location else "redirected (no location)"
    return f"{where}; redirects are not followed, set the provider's base_url to the final address"


def error_text_from_body(body: bytes) -> str:
    """The human part of a provider error body: `error.message`, `message`, or the raw text."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data: Any = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return text[:2000] or "(empty body)"
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            message = err.get("message") or err.get("msg")
            kind = err.get("type") or err.get("code") or err.get("status")
            if isinstance(message, str) and message:
                return f"{kind}: {message}" if isinstance(kind, str) and kind else message
        elif isinstance(err, str) and err:
            return err
    return text[:2000]


class HttpAdapter(ABC):
    """Base of the provider adapters: implements the `LLM` protocol over HTTP (llm/upstream.py)."""

    api: ClassVar[str]

    def __init__(self, provider: ProviderSettings):
        self.provider = provider
        self.upstream = Upstream(
            connect_timeout=provider.connect_timeout_s, read_timeout=provider.read_timeout_s
        )

    async def aclose(self) -> None:
        await self.upstream.aclose()

    async def open_exchange(self, prepared: PreparedRequest) -> Exchange:
        """Send the prepared request (with the key added now); return at the response head."""
        headers = [*prepared.headers, *self.auth_headers()]
        return await self.upstream.request(prepared.method, prepared.url, headers, prepared.body)

    # -- what each adapter provides ------------------------------------------------------------

    @abstractmethod
    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest: ...

    @abstractmethod
    def auth_headers(self) -> list[tuple[str, str]]: ...

    @abstractmethod
    def new_decoder(self, assembler: MessageAssembler) -> StreamDecoder: ...

    def error_message(self, status: int, body: bytes) -> str:
        return error_text_from_body(body)

    def error_kind(self, status: int, body: bytes) -> ErrorKind | None:
        """What an error answer means where the loop acts on it (context_errors.py)."""
        return None

    def context_limit(self, body: bytes) -> ContextLimit | None:
        """The window and prompt size a "too long" answer gives, where it gives them."""
        return None

    # -- LLM protocol ----------------------------------------------------------------------

    def send(
        self, prepared: PreparedRequest, *, observe: SSEObserver | None = None
    ) -> HttpResponseStream:
        """`observe`, when given, sees every SSE event before the decoder does: what a call
        needs beyond the native events (a provider's search results, llm/native_search.py)."""
        stream = HttpResponseStream(self, prepared, observe)
        stream.start()
        return stream

    def call(self, request: RequestMessages, settings: ModelSettings) -> HttpResponseStream:
        return self.send(self.prepare(request, settings))

    def new_assembler(self, prepared: PreparedRequest) -> MessageAssembler:
        return MessageAssembler(api=self.api, provider=self.provider.name, model=prepared.model)

    def redact(self, text: str) -> str:
        return redact(text, [self.provider.api_key])


class Exchange(Protocol):
    """A response being received (`UpstreamResponse`)."""

    @property
    def status(self) -> int: ...

    @property
    def fields(self) -> Mapping[str, str]: ...

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...

    def abort(self) -> None:
        """Drop the connection now (never back to the pool); `chunks()` then ends in error."""
        ...


_TIMEOUTS = (UpstreamTimeout,)
_CONNECT_TIMEOUTS = (ConnectTimeout,)
_HTTP_ERRORS = (UpstreamError,)


class _Closed(Exception):
    """`aclose()` came while the sink had an event: the reading task ends the stream."""


class _Observed:
    """A decoder whose SSE events are shown to an observer first."""

    __slots__ = ("_decoder", "_observe")

    def __init__(self, decoder: StreamDecoder, observe: SSEObserver) -> None:
        self._decoder = decoder
        self._observe = observe

    def feed(self, event: SSEEvent) -> list[ResponseEvent]:
        self._observe(event)
        return self._decoder.feed(event)

    def finish(self) -> list[ResponseEvent]:
        return self._decoder.finish()


class HttpResponseStream:
    def __init__(
        self, adapter: HttpAdapter, prepared: PreparedRequest, observe: SSEObserver | None = None
    ) -> None:
        self._adapter = adapter
        self._prepared = prepared
        self._observe = observe
        self._assembler = adapter.new_assembler(prepared)
        self._queue: asyncio.Queue[ResponseEvent] = asyncio.Queue()
        self._sink: EventSink | None = None
        self._delivering = False  # the reading task is inside the sink
        self._task: asyncio.Task[None] | None = None
        self._queued_terminal = False
        self._delivered_terminal = False
        self._closed = False
        self._received = False  # `recv` was called
        self._answered = False  # the provider's response head came
        self._response: Exchange | None = None  # the response being read, once its head came

    def start(self) -> None:
        """Open the request now rather than at the first `recv` when a loop is running, so the
        connection and the provider's first token overlap whatever the caller does next."""
        if self._task is None and not self._closed:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop yet: the first `recv` starts it
            self._task = loop.create_task(self._pump())

    def deliver(self, sink: EventSink) -> None:
        if self._sink is not None or self._received or not self._queue.empty():
            raise RuntimeError("deliver() comes once, before any event was read")
        self._sink = sink
        self.start()

    async def recv(self) -> ResponseEvent:
        if self._sink is not None:
            raise RuntimeError("this stream delivers its events to a sink")
        self._received = True
        if self._delivered_terminal:
            raise StreamEnded("the stream already ended")
        self.start()
        event = await self._queue.get()
        if isinstance(event, DoneEvent | ErrorEvent):
            self._delivered_terminal = True
        return event

    def progress(self) -> StreamProgress:
        return self._assembler.progress()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._response is not None:
            # At once, whatever the reading task is doing: the provider sees the connection
            # close now, not when a sink that holds an event returns.
            self._response.abort()
        if self._delivering:
            return  # the reading task sees `_closed` when the sink returns, and ends it
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if (current := asyncio.current_task()) is not None and current.cancelling():
                    raise
        if not self._queued_terminal:
            await self._emit(self._fail("aborted: the stream was closed", reason="aborted"))

    # -- the reading task ------------------------------------------------------------------

    def _terminal(self, event: DoneEvent | ErrorEvent) -> ResponseEvent:
        """The terminal event as it leaves the stream; nothing leaves after it."""
        if isinstance(event, ErrorEvent):
            # Decoders build in-band errors from provider text, which may echo the key.
            text = event.message.error_message
            if text and (clean := self._adapter.redact(text)) != text:
                event = msgspec.structs.replace(
                    event, message=msgspec.structs.replace(event.message, error_message=clean)
                )
        self._queued_terminal = True
        return event

    async def _emit(self, event: ResponseEvent) -> None:
        if self._queued_terminal:
            return
        if isinstance(event, DoneEvent | ErrorEvent):
            event = self._terminal(event)
        sink = self._sink
        if sink is None:
            self._queue.put_nowait(event)
            return
        self._delivering = True
        try:
            await sink(event)
        except Exception:
            log.exception("the consumer of a %s stream failed", self._adapter.provider.name)
            self._queued_terminal = True  # nothing more goes to a sink that broke
        finally:
            self._delivering = False
        if self._closed and not self._queued_terminal:
            raise _Closed

    def _fail(self, message: str, **kwargs: Any) -> ErrorEvent:
        asm = self._assembler
        text = self._adapter.redact(message)
        if asm.terminated:  # cannot happen through _emit's guard; keeps the invariant explicit
            raise RuntimeError(text)
        return asm.fail(text, **kwargs)

    async def _pump(self) -> None:
        try:
            await self._read()
        except _Closed:
            await self._emit(self._fail("aborted: the stream was closed", reason="aborted"))

    async def _read(self) -> None:
        provider = self._adapter.provider
        watch = OutputWatch(
            first_output_s=provider.first_output_timeout_s, idle_s=provider.idle_timeout_s
        )
        try:
            await self._exchange(watch)
        except asyncio.CancelledError:
            if (deadline := watch.claim()) is None:
                raise
            # Past the first-output deadline nothing was output (the held events are dropped):
            # a failure before output, retried or failed over like a refused connection.
            await self._emit(
                self._fail(
                    missed(provider.name, deadline, watch.limit(deadline), answered=self._answered),
                    transient=deadline is Deadline.FIRST_OUTPUT,
                )
            )
        finally:
            watch.stop()

    async def _exchange(self, watch: OutputWatch) -> None:
        adapter = self._adapter
        name = adapter.provider.name
        try:
            response = await watch.wait(adapter.open_exchange(self._prepared))
        except _CONNECT_TIMEOUTS as exc:
            await self._emit(self._fail(f"{name}: timed out connecting: {exc}", transient=True))
            return
        except _TIMEOUTS as exc:  # connected, then silence: say so, not "connecting"
            await self._emit(self._fail(f"{name}: {exc}", transient=True))
            return
        except _HTTP_ERRORS as exc:
            await self._emit(self._fail(f"{name}: could not connect: {exc}", transient=True))
            return
        self._answered = True
        self._response = response
        if self._closed:  # closed while the response head was on its way
            response.abort()
        try:
            if not 200 <= response.status < 300:
                kind: ErrorKind | None = None
                limit: ContextLimit | None = None
                if response.status >= 400:
                    body = await watch.wait(_read_bounded(response))
                    detail = adapter.error_message(response.status, body)
                    kind = adapter.error_kind(response.status, body)
                    if kind == ErrorKind.CONTEXT_LENGTH:
                        limit = adapter.context_limit(body)
                else:
                    detail = not_followed(response.status, response.fields)
                await self._emit(
                    self._fail(
                        f"{name} HTTP {response.status}: {detail}",
                        http_status=response.status,
                        retry_after_ms=parse_retry_after(response.fields),
                        kind=kind,
                        context_limit=limit,
                    )
                )
                return
            # Until the first content event, `start` and what follows it wait in `held`.
            held: list[ResponseEvent] | None = [self._assembler.start()]
            decoder: StreamDecoder = adapter.new_decoder(self._assembler)
            if self._observe is not None:  # wrapped once: plain calls pay nothing per event
                decoder = _Observed(decoder, self._observe)
            parser = SSEParser()
            chunks = response.chunks()
            # A burst of buffered chunks is decoded without the socket ever making this task
            # wait, which would hold other runs (and, for `recv`, every event) back until the
            # whole burst is decoded: the loop gets a turn after YIELD_EVERY_S of decoding
            # since the last wait. For `recv` also a few turns at the first content event, so
            # the first token goes out at once; a sink has it written already.
            first_turns = FIRST_CONTENT_YIELDS if self._sink is None else 0
            content_seen = False
            turns = 0  # loop turns owed before decoding on
            busy_from = settled = time.monotonic()
            while True:
                watch.waiting = True  # the one wait the output deadlines may cut
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    watch.waiting = False
                arrived = time.monotonic()
                if arrived - settled >= WAITED_S:
                    busy_from = arrived  # the read waited: the loop had its turns
                for sse in parser.feed(chunk):
                    for event in decoder.feed(sse):
                        if isinstance(event, CONTENT_EVENTS):
                            if content_seen:
                                watch.last_output = arrived
                            else:
                                watch.first_output(arrived)
                                content_seen = True
                                turns = first_turns
                        if held is None:
                            await self._emit(event)
                        else:
                            held = await self._before_output(held, event)
                    if self._queued_terminal:
                        watch.stop()
                        await _drain(chunks)  # so the connection goes back to the pool
                        return
                    settled = time.monotonic()
                    if turns or settled - busy_from >= YIELD_EVERY_S:
                        for _ in range(max(turns, 1)):
                            await asyncio.sleep(0)
                        turns = 0
                        busy_from = settled = time.monotonic()
            watch.stop()
            ends = [event for sse in parser.finish() for event in decoder.feed(sse)]
            if not ends or not isinstance(ends[-1], DoneEvent | ErrorEvent):
                ends += decoder.finish()
            if not ends or not isinstance(ends[-1], DoneEvent | ErrorEvent):
                ends.append(self._fail(f"{name}: the stream ended without a final event"))
            for event in ends:
                held = await self._before_output(held, event)
        except _Closed:
            raise
        except _TIMEOUTS:
            await self._emit(
                self._fail(f"{name}: no data for {adapter.provider.read_timeout_s:g} s; gave up")
            )
        except ConnectionReset as exc:
            # Named as what it is: the provider's answer was cut by a reset, not ended by the
            # provider (a decoder would only see a stream without its end marker).
            log.warning("%s: the provider connection was reset mid-stream: %s", name, exc)
            await self._emit(
                self._fail(
                    f"{name}: the provider connection was reset mid-stream ({exc}); the "
                    "answer is cut short",
                    transient=True,  # retried only when nothing was output yet
                )
            )
        except _HTTP_ERRORS as exc:
            await self._emit(self._fail(f"{name}: connection lost mid-stream: {exc}"))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a malformed stream must end the call, not the server
            await self._emit(self._fail(f"{name}: could not decode the provider stream: {exc!r}"))
        finally:
            await response.aclose()

    async def _before_output(
        self, held: list[ResponseEvent] | None, event: ResponseEvent
    ) -> list[ResponseEvent] | None:
        """Hold `event` while no content came, or let the held ones go; None once they went.

        Held, a call that fails before any content ends in a lone `error`, which tells the
        retry policy (and fallbacks) that nothing was output, as for a refused connection."""
        if held is None:
            await self._emit(event)
            return None
        if isinstance(event, ErrorEvent):
            await self._emit(event)  # the held `start` and empty blocks are dropped
            return None
        if isinstance(event, _RELEASING) or len(held) >= MAX_HELD_EVENTS:
            for earlier in held:
                await self._emit(earlier)
            await self._emit(event)
            return None
        held.append(event)
        return held


async def _drain(
    chunks: AsyncIterator[bytes], limit: int = 64 * 1024, timeout: float = 1.0
) -> None:
    """Read what follows the terminal event (`[DONE]`, the end of the body) so the connection
    goes back to the pool; a provider that keeps talking past that is cut off by closing it."""
    seen = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in chunks:
                seen += len(chunk)
                if seen > limit:
                    return
    except (TimeoutError, *_HTTP_ERRORS):
        return


async def _read_bounded(response: Exchange) -> bytes:
    out = bytearray()
    async for chunk in response.chunks():
        out += chunk
        if len(out) >= MAX_ERROR_BODY:
            break
    return bytes(out[:MAX_ERROR_BODY])
