"""Retries of failed model calls, outside the pure agent loop.

`RetryingLLM` wraps any `LLM`. A call is retried only when it failed before anything was
emitted (the first event is a lone `error`, no `start`) and the failure is one that may pass:
a connect failure or a missed first-output deadline (`transient`), or HTTP 429 / 5xx overload
statuses. A retry resends the very
same `PreparedRequest` (same bytes, so the provider's prompt cache still matches). Once a
`start` went out nothing is retried: the consumer already saw output. A call whose retries are
spent still ends in a lone `error`, which is what lets the loop try a fallback model (a new call,
docs/loop.md "Fallback models").

Delays: exponential backoff with jitter ("full": uniform in [0, min(cap, base * 2^n)];
"decorrelated": uniform in [base, 3 * previous], capped). A provider's `Retry-After` /
`retry-after-ms` (`ErrorEvent.retry_after_ms`) replaces the computed delay and is honored as
given, not shortened: retrying earlier than asked would only fail again. If it asks for more
than `max_retry_after_s` (default: the cap, 20 s) we give up at once and return its error, so
the user hears about a long rate limit instead of a silent minute-long wait. Attempts are
bounded (default 4 in all) and so is total time (default 60 s): when the next delay would end
past the budget we give up and return the last error. `aclose()` during a backoff sleep ends
the stream at once with an `aborted` error.
"""

from __future__ import annotations

import asyncio
import logging
import random as _random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import msgspec

from .events import DoneEvent, ErrorEvent, ResponseEvent
from .settings import ModelSettings
from .stream import LLM, EventSink, PreparedRequest, ResponseStream, StreamEnded, StreamProgress
from .types import AssistantMessage, RequestMessages

log = logging.getLogger(__name__)

DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_BASE_DELAY_S = 0.5
DEFAULT_MAX_DELAY_S = 20.0
DEFAULT_TOTAL_BUDGET_S = 60.0
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504, 529})

Sleep = Callable[[float], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = DEFAULT_MAX_ATTEMPTS  # in all, the first one included
    base_delay_s: float = DEFAULT_BASE_DELAY_S
    max_delay_s: float = DEFAULT_MAX_DELAY_S  # cap of one computed backoff delay
    total_budget_s: float = DEFAULT_TOTAL_BUDGET_S  # from the first send to the last retry
    jitter: Literal["full", "decorrelated"] = "full"
    # Longest provider-requested wait we sit through; None means `max_delay_s`.
    max_retry_after_s: float | None = None
    retry_statuses: frozenset[int] = RETRYABLE_STATUSES

    def is_retryable(self, event: ErrorEvent) -> bool:
        if event.reason != "error":
            return False
        return event.transient or event.http_status in self.retry_statuses

    def backoff(self, retry: int, previous_s: float, rand: float) -> float:
        """Delay before retry number `retry` (1-based), `rand` uniform in [0, 1)."""
        base, cap = self.base_delay_s, self.max_delay_s
        if self.jitter == "decorrelated":
            high = max(base, previous_s * 3)
            return min(cap, base + rand * (high - base))
        return rand * min(cap, base * (1 << max(0, retry - 1)))

    def retry_after_limit_s(self) -> float:
        return self.max_delay_s if self.max_retry_after_s is None else self.max_retry_after_s


class RetryingLLM:
    """`LLM` whose streams retry a failed send as `RetryPolicy` allows."""

    def __init__(
        self,
        inner: LLM,
        policy: RetryPolicy = RetryPolicy(),
        *,
        sleep: Sleep = asyncio.sleep,
        random: Callable[[], float] = _random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.policy = policy
        self._sleep = sleep
        self._random = random
        self._clock = clock

    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest:
        return self.inner.prepare(request, settings)

    def send(self, prepared: PreparedRequest) -> RetryingStream:
        return RetryingStream(self, prepared)

    def call(self, request: RequestMessages, settings: ModelSettings) -> RetryingStream:
        return self.send(self.prepare(request, settings))


class RetryingStream:
    """One logical call: sends, and resends on a retryable first error. `attempts` counts the
    sends made so far (for logs); `delays` the backoff sleeps taken, in seconds."""

    def __init__(self, owner: RetryingLLM, prepared: PreparedRequest) -> None:
        self._owner = owner
        self._prepared = prepared
        self._current: ResponseStream | None = None
        self._first_done = False
        self._delivered_terminal = False
        self._closed = False
        self._last_error: ErrorEvent | None = None
        self._sleep_task: asyncio.Future[object] | None = None
        self._sink: EventSink | None = None
        self._retrying: asyncio.Task[None] | None = None  # a sink's backoff and resend
        self._started = owner._clock()
        self._previous = owner.policy.base_delay_s
        self.delays: list[float] = []
        # The first attempt goes out now (see HttpResponseStream.start), not at the first recv.
        self._current = owner.inner.send(prepared)
        self.attempts = 1

    async def recv(self) -> ResponseEvent:
        if self._delivered_terminal:
            raise StreamEnded("the stream already ended")
        if self._closed and (self._current is None or not self._first_done):
            return self._deliver(self._aborted())
        if not self._first_done:
            event = await self._first_event()
        else:
            assert self._current is not None
            event = await self._current.recv()
        return self._deliver(event)

    def deliver(self, sink: EventSink) -> None:
        if self._sink is not None:
            raise RuntimeError("deliver() comes once")
        self._sink = sink
        assert self._current is not None
        self._current.deliver(self._from_attempt)

    def progress(self) -> StreamProgress:
        """The current attempt's (an attempt retried failed before any output)."""
        return self._current.progress() if self._current is not None else StreamProgress()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._sleep_task is not None and not self._sleep_task.done():
            self._sleep_task.cancel()
        if self._current is not None:
            await self._current.aclose()

    # -- internals -------------------------------------------------------------------------

    def _deliver(self, event: ResponseEvent) -> ResponseEvent:
        if isinstance(event, DoneEvent | ErrorEvent):
            self._delivered_terminal = True
        return event

    async def _forward(self, event: ResponseEvent) -> None:
        """To the sink, once: nothing follows the terminal event. (`_from_attempt` does the
        same inline for the events after an attempt's first.)"""
        if self._delivered_terminal:
            return
        assert self._sink is not None
        await self._sink(self._deliver(event))

    def _retry_delay(self, event: ResponseEvent) -> float | None:
        """The backoff before sending again when `event`, an attempt's first, calls for a
        retry; None when it goes to the consumer as it is."""
        if self._closed or not isinstance(event, ErrorEvent):
            return None
        if not self._owner.policy.is_retryable(event):
            return None
        self._last_error = event
        delay = self._next_delay(event, self._previous, self._owner._clock() - self._started)
        if delay is None:
            return None
        self._previous = delay
        self.delays.append(delay)
        log.info(
            "retrying %s in %.2f s (attempt %d failed: %s)",
            self._prepared.model,
            delay,
            self.attempts,
            event.error_message,
        )
        return delay

    async def _from_attempt(self, event: ResponseEvent) -> None:
        """The sink of each attempt's stream."""
        if self._first_done:  # every event but the first: `_forward`, one call less each
            if self._delivered_terminal:
                return
            if isinstance(event, DoneEvent | ErrorEvent):
                self._delivered_terminal = True
            sink = self._sink
            assert sink is not None  # set by the deliver() that made this the attempt's sink
            await sink(event)
            return
        delay = self._retry_delay(event)
        if delay is None:
            self._first_done = True
            await self._forward(event)
            return
        # That attempt is over (its error was its terminal event); the next one is sent from
        # a task of its own, since this call runs in the finished attempt's reader.
        self._retrying = asyncio.get_running_loop().create_task(self._send_again(delay))

    async def _send_again(self, delay: float) -> None:
        if self._closed or not await self._backoff(delay):
            self._first_done = True
            await self._forward(self._aborted())
            return
        self.attempts += 1
        self._current = self._owner.inner.send(self._prepared)
        self._current.deliver(self._from_attempt)

    async def _first_event(self) -> ResponseEvent:
        owner = self._owner
        while True:
            if self._current is None:
                self.attempts += 1
                self._current = owner.inner.send(self._prepared)
            event = await self._current.recv()
            delay = self._retry_delay(event)
            if delay is None:
                self._first_done = True
                return event
            await self._current.aclose()  # finished already; frees whatever it still holds
            self._current = None
            if not await self._backoff(delay):
                self._first_done = True
                return self._aborted()

    def _next_delay(self, event: ErrorEvent, previous: float, elapsed: float) -> float | None:
        """The wait before the next attempt, or None to give up."""
        policy = self._owner.policy
        if self.attempts >= policy.max_attempts:
            return None
        if event.retry_after_ms is not None:
            delay = event.retry_after_ms / 1000
            if delay > policy.retry_after_limit_s():
                return None
        else:
            delay = policy.backoff(self.attempts, previous, self._owner._random())
        if elapsed + delay > policy.total_budget_s:
            return None
        return delay

    async def _backoff(self, delay: float) -> bool:
        """Sleep; False when `aclose()` cut the sleep short."""
        task = asyncio.ensure_future(self._owner._sleep(delay))
        self._sleep_task = task
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return False
        finally:
            self._sleep_task = None
        return not self._closed

    def _aborted(self) -> ErrorEvent:
        """The terminal event of a stream closed while no inner stream was running."""
        text = "aborted: the stream was closed"
        last = self._last_error
        if last is not None:
            message = msgspec.structs.replace(
                last.message, stop_reason="aborted", error_message=text
            )
        else:
            message = AssistantMessage(
                content=(),
                api=str(getattr(self._owner.inner, "api", "")),
                provider=str(getattr(getattr(self._owner.inner, "provider", None), "name", "")),
                model=self._prepared.model,
                stop_reason="aborted",
                error_message=text,
            )
        return ErrorEvent(reason="aborted", message=message)
