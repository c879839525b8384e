"""The gate that lets a run's inputs into `transition` one at a time (`async with gate:`).

An asyncio.Lock does the same, in five Python-level calls per input even when nobody waits
(`__aenter__`, `acquire`, `__aexit__`, `release`, `_wake_up_first`), and a run takes it for
every input, each streamed delta included (issue 28). This gate costs its two dunder calls when
it is free, nothing more. When it is busy the newcomer waits on a future of its own, in arrival
order, and the holder hands the gate straight to the first waiter as it leaves (a waiter
canceled after being handed the gate passes it on), as asyncio.Lock does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType


class InputGate:
    __slots__ = ("_waiters", "busy")

    def __init__(self) -> None:
        self.busy = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def __aenter__(self) -> None:
        if not self.busy:
            self.busy = True
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._leave()  # handed the gate, then canceled: the next one gets it
            else:
                self._waiters.remove(waiter)
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._waiters:  # nobody waits (nearly always): `_leave` in short
            self.busy = False
            return
        self._leave()

    def _leave(self) -> None:
        """Hand the gate to the first waiter still waiting, else open it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # it holds the gate now: `busy` stays True
                return
        self.busy = False


__all__ = ["InputGate"]
