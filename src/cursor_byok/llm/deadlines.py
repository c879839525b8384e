"""Deadlines on a provider's output, counted in content events, not in bytes.

A per-read timeout never fires for an upstream that keeps the socket busy without answering:
SSE comments, pings, metadata events or one byte a second reset it each time. So a call is
also bounded by what its consumer gets: the first content event (a text, thinking or
tool-call delta) must come within `first_output_timeout_s` of the send, and each next one
within `idle_timeout_s` of the one before.

One timer per call: the reader only notes when content arrived (no timer per read, which the
hot path would pay for every chunk), and the timer, when it fires, re-arms itself for the
deadline as it now stands or ends the read by cancelling the reading task. It cuts only a wait
for the provider: while the reader hands an event to its consumer (a slow client), the
provider is not the one holding the call, so the check is repeated a little later instead.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable
from typing import TypeVar, assert_never

T = TypeVar("T")

# How soon a deadline that passed while the reader was busy with its consumer is checked again.
BUSY_RECHECK_S = 0.05


class Deadline(enum.Enum):
    FIRST_OUTPUT = "first_output_timeout_s"
    IDLE = "idle_timeout_s"


class OutputWatch:
    """The deadlines of one call, read by the task that creates it (the stream's reader).

    The reader sets `waiting` around each wait for the provider, calls `first_output(t)` for
    the first content event and sets `last_output` for each later one; after a
    `CancelledError`, `claim()` says whether a deadline caused it."""

    __slots__ = (
        "_first_s",
        "_handle",
        "_idle_s",
        "_loop",
        "_task",
        "expired",
        "last_output",
        "sent",
        "waiting",
    )

    def __init__(self, *, first_output_s: float, idle_s: float) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("an OutputWatch belongs to the task that reads the stream")
        self._loop = asyncio.get_running_loop()
        self._task = task
        self._first_s = first_output_s
        self._idle_s = idle_s
        self.sent = time.monotonic()
        self.last_output: float | None = None  # time.monotonic() of the last content event
        self.waiting = False
        self.expired: Deadline | None = None
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(
            first_output_s, self._check
        )

    def limit(self, deadline: Deadline) -> float:
        """The deadline's length in seconds."""
        return self._first_s if deadline is Deadline.FIRST_OUTPUT else self._idle_s

    async def wait(self, awaitable: Awaitable[T]) -> T:
        """Await the provider where the deadlines may cut the wait (the reader's hot loop sets
        `waiting` itself)."""
        self.waiting = True
        try:
            return await awaitable
        finally:
            self.waiting = False

    def first_output(self, at: float) -> None:
        """The first content event came at `at`; the reader notes each later one in
        `last_output`, which only moves the deadline later, so the timer need not move."""
        self.last_output = at
        if self._handle is not None:  # the idle deadline may come before the first-output one
            self._handle.cancel()
            self._handle = self._loop.call_later(
                max(0.0, at + self._idle_s - time.monotonic()), self._check
            )

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def claim(self) -> Deadline | None:
        """The deadline that cancelled the reader, or None when the cancellation came from
        elsewhere (`aclose()`, a shutdown), which must then propagate."""
        expired, self.expired = self.expired, None
        if expired is None or self._task.uncancel() > 0:
            return None
        return expired

    def _check(self) -> None:
        self._handle = None
        if self.last_output is None:
            kind, due = Deadline.FIRST_OUTPUT, self.sent + self._first_s
        else:
            kind, due = Deadline.IDLE, self.last_output + self._idle_s
        now = time.monotonic()
        if now < due:
            self._handle = self._loop.call_later(due - now, self._check)
        elif not self.waiting:
            self._handle = self._loop.call_later(BUSY_RECHECK_S, self._check)
        else:
            self.expired = kind
            self._task.cancel()


def missed(provider: str, deadline: Deadline, seconds: float, *, answered: bool) -> str:
    """What the client is told: the provider, the deadline, the setting that sets it."""
    match deadline:
        case Deadline.FIRST_OUTPUT if not answered:
            return f"{provider}: no response within {seconds:g} s ({deadline.value}); gave up"
        case Deadline.FIRST_OUTPUT:
            return (
                f"{provider}: no output within {seconds:g} s ({deadline.value}): it answered "
                "but sent no text, thinking or tool call; gave up"
            )
        case Deadline.IDLE:
            return f"{provider}: no output for {seconds:g} s ({deadline.value}); gave up"
        case _:
            assert_never(deadline)
