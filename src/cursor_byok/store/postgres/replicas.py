"""What the replicas of one database share besides its rows (store.api.ConversationClaims):
notifications, each channel LISTENed to on a connection and a thread of its own, and the
session-level advisory locks by which this process holds a conversation."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from .errors import map_error
from .pool import Pool

log = logging.getLogger("cursor_byok.store")

CLAIMS_CHANNEL = "cursor_byok_claims"
APPENDS_CHANNEL = "cursor_byok_appends"
RECONNECT_S = 0.5  # a listener that lost its connection tries again this often


class Watcher:
    """A connection of its own that LISTENs on one channel, on a thread of its own (psycopg's
    `notifies` blocks), handing each payload to the caller's event loop."""

    def __init__(
        self,
        url: str,
        channel: str,
        on_payload: Callable[[str], None],
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        self._url = url
        self._channel = channel
        self._on_payload = on_payload
        self._on_reconnect = on_reconnect
        self._loop = asyncio.get_running_loop()
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"store-pg-{channel}", daemon=True)

    async def start(self) -> None:
        self._thread.start()
        await asyncio.to_thread(self._listening.wait, 10)

    def _main(self) -> None:
        lost = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {self._channel}")
                    self._listening.set()
                    if lost and self._on_reconnect is not None:
                        # What was announced while the connection was down was missed: the
                        # caller looks again at what it waits for (relay.py: every run here).
                        with contextlib.suppress(RuntimeError):
                            self._loop.call_soon_threadsafe(self._reconnected)
                    lost = False
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            with contextlib.suppress(RuntimeError):  # the loop is closed
                                self._loop.call_soon_threadsafe(self._deliver, note.payload)
            except psycopg.Error:
                # The server went away: listen again once it is back. What was announced in
                # between is missed: the version compare-and-set still decides between runs,
                # and `on_reconnect` tells the appends' listener to read what it missed.
                lost = True
                self._listening.set()
                self._stop.wait(RECONNECT_S)

    def _reconnected(self) -> None:
        assert self._on_reconnect is not None
        try:
            self._on_reconnect()
        except Exception:  # pragma: no cover - the handlers must not raise
            log.exception("handling a reconnect on %s", self._channel)

    def _deliver(self, payload: str) -> None:
        try:
            self._on_payload(payload)
        except Exception:  # pragma: no cover - the handlers must not raise
            log.exception("handling a notification on %s", self._channel)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def lock_key(conversation_id: str) -> int:
    """The advisory lock key of a conversation: 64 bits of its sha256, signed."""
    digest = hashlib.sha256(b"cursor-byok conversation " + conversation_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class Holds:
    """The connection that holds this process's advisory locks, used on one thread only."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._conn: psycopg.Connection[Any] | None = None
        self._held: set[int] = set()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._held.clear()  # a lost connection lost its locks with it
            self._conn = self._pool.connect()
        return self._conn

    def try_lock(self, key: int) -> bool:
        if key in self._held:
            return True
        try:
            try:
                conn = self._connection()
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            except psycopg.OperationalError:
                if not conn.broken:
                    raise
                # Dropped while idle (the server restarted; its locks went with it): again, on
                # a new connection.
                row = (
                    self._connection().execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                )
        except psycopg.Error as exc:
            raise map_error(exc, self._pool.path, "taking a conversation's hold") from exc
        if row is not None and row[0]:
            self._held.add(key)
            return True
        return False

    def unlock(self, key: int) -> None:
        if key not in self._held or self._conn is None:
            return
        self._held.discard(key)
        with contextlib.suppress(psycopg.Error):
            self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
