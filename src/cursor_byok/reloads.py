"""A directory loaded from the store when it is used, at most `refresh_s` stale, and never
while the server is idle.

The person tokens and the signed-in sessions are checked synchronously, before a request's
body is read, so they are kept in memory; they used to be reloaded every 2 s by a timer,
which was most of an idle server's work (issue 28: 0.24 M instructions a second against 0.07
before tokens existed). Now each request asks `refresh()` first: past `soon_s` (three
quarters of `refresh_s`) a reload starts in the background and the request goes on with the
list in memory; past `refresh_s` the request waits for the reload (one at a time, shared by
every request that waits). A server under steady traffic reloads in the background about
every 1.5 s and no request waits; an idle one does nothing, and its first request after the
pause waits for one reload, so no request is answered from a list older than `refresh_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("cursor_byok.tokens")


class Reloads:
    def __init__(
        self,
        load: Callable[[], Awaitable[None]],
        refresh_s: float,
        what: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self.refresh_s = refresh_s
        self.soon_s = refresh_s * 0.75
        self._what = what
        self._clock = clock
        self._loaded_at = -float("inf")
        self._task: asyncio.Task[None] | None = None
        self.loads = 0  # reloads started (for tests)

    def loaded(self) -> None:
        """A load just finished (the first one, at start, is awaited by the owner)."""
        self._loaded_at = self._clock()

    def refresh(self) -> asyncio.Task[None] | None:
        """None when the list may be used as it is; else the reload to wait for."""
        age = self._clock() - self._loaded_at
        if age < self.soon_s:
            return None
        task = self._task
        if task is None or task.done():
            task = self._task = asyncio.get_running_loop().create_task(self._reload())
        return task if age >= self.refresh_s else None

    async def _reload(self) -> None:
        self.loads += 1
        try:
            await self._load()
        except Exception as exc:  # keep the last list; the next request past soon_s tries again
            log.warning("could not reload the %s: %s", self._what, exc)
        self._loaded_at = self._clock()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


__all__ = ["Reloads"]
