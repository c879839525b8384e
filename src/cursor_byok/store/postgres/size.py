"""A size cap for a PostgreSQL database, which has none of its own (SQLite has max_page_count).

The database's size (`pg_database_size`) is polled; once it reaches the cap, every write that
could grow it fails with StoreFullError, as SQLite's writes past max_page_count do: the client
is told `unavailable`, "storage full", and nothing of the failed write is committed. Writes
that only delete (the append buffer's) still run, and new runs are served again once the size
is below the cap at a later poll (after VACUUM, or a higher cap).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ..errors import StoreError, StoreFullError

log = logging.getLogger("cursor_byok.store")

POLL_S = 5.0  # how stale the size may be: a write burst may pass the cap by that much


class SizeCap:
    """The cap (None: none), the last size polled, and the task that polls it."""

    def __init__(self, database: str, poll_s: float = POLL_S) -> None:
        self.database = database
        self.limit: int | None = None
        self.size = 0  # bytes at the last poll (0: not polled yet)
        self._poll_s = poll_s
        self._task: asyncio.Task[None] | None = None

    @property
    def full(self) -> bool:
        return self.limit is not None and self.size >= self.limit

    def check(self, what: str) -> None:
        """Raise StoreFullError for a write while the database is at its cap."""
        if self.full:
            raise StoreFullError(
                self.database,
                "database is at its size limit",
                f"{what}: {self.size} of {self.limit} bytes (server.database_max_mib)",
            )

    async def start(self, limit: int | None, measure: Callable[[], Awaitable[int]]) -> None:
        """Cap at `limit` bytes and poll `measure` (once now, then every poll_s)."""
        self.limit = limit
        await self.poll(measure)
        if self.full:
            self._say()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._polling(measure))

    async def poll(self, measure: Callable[[], Awaitable[int]]) -> None:
        try:
            self.size = await measure()
        except StoreError as exc:  # the server is away: keep the last size, say so once
            log.warning("could not read the database's size: %s", exc)

    async def _polling(self, measure: Callable[[], Awaitable[int]]) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            was_full = self.full
            await self.poll(measure)
            if self.full != was_full:
                self._say()

    def _say(self) -> None:
        log.warning(
            "%s: %s its size limit (%d of %s bytes)%s",
            self.database,
            "at" if self.full else "below",
            self.size,
            self.limit,
            "; new runs are refused" if self.full else "; new runs are served again",
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
