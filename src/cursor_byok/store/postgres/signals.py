"""The PostgreSQL store's side for replicas (store.api.ConversationClaims and the shim's
appends): claims announced by NOTIFY, conversations held by advisory locks, a shim run's client
messages stored and announced for the replica that serves its stream (replicas.py has the
connections and threads these use). A base class of PostgresStore, which supplies the pool."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..sql import Conn
from .replicas import APPENDS_CHANNEL, CLAIMS_CHANNEL, Holds, Watcher, lock_key

T = TypeVar("T")


class ReplicaSignals:
    """Claims, holds and appends over the store's own connections."""

    url: str
    _closed: bool
    _clock: Callable[[], int]
    _watchers: list[Watcher]
    _holds: Holds
    _holds_executor: ThreadPoolExecutor

    def _check_open(self) -> None:
        raise NotImplementedError

    async def _run(
        self,
        fn: Callable[[Conn], T],
        what: str,
        *,
        write: bool,
        durable: bool = True,
        snapshot: bool = False,
    ) -> T:
        raise NotImplementedError

    # ------------------------------------------------------------------ claims (replicas)

    async def announce_claim(self, conversation_id: str, claimant: str) -> None:
        """NOTIFY every process listening on this database (store.api.ConversationClaims)."""
        payload = f"{conversation_id}\n{claimant}"
        await self._run(
            lambda conn: conn.execute("SELECT pg_notify(?, ?)", (CLAIMS_CHANNEL, payload)),
            f"announcing a run of {conversation_id!r}",
            write=True,
            durable=False,
        )

    async def hold_conversation(self, conversation_id: str) -> bool:
        """`pg_try_advisory_lock` on the hold connection (store.api.ConversationClaims)."""
        self._check_open()
        key = lock_key(conversation_id)
        return await asyncio.get_running_loop().run_in_executor(
            self._holds_executor, self._holds.try_lock, key
        )

    async def release_conversation(self, conversation_id: str) -> None:
        if self._closed:
            return
        key = lock_key(conversation_id)
        with contextlib.suppress(RuntimeError):  # the executor was shut down by close()
            await asyncio.get_running_loop().run_in_executor(
                self._holds_executor, self._holds.unlock, key
            )

    async def watch_claims(self, on_claim: Callable[[str, str], None]) -> None:
        def split(payload: str) -> None:
            cid, _, claimant = payload.partition("\n")
            on_claim(cid, claimant)

        await self._watch(CLAIMS_CHANNEL, split)

    async def _watch(self, channel: str, on_payload: Callable[[str], None]) -> None:
        self._check_open()
        watcher = Watcher(self.url, channel, on_payload)
        self._watchers.append(watcher)
        await watcher.start()

    # ------------------------------------------------------------------ appends (replicas)

    async def publish_append(self, request_id: str, seqno: int, payload: bytes) -> bool:
        """Store one client message of a shim run, then NOTIFY every replica (in the same
        transaction: the notification goes out once the row is committed). False: that
        (request_id, seqno) was stored before (the client sent it again)."""
        now = self._clock()

        def job(conn: Conn) -> bool:
            cur = conn.execute(
                "INSERT INTO run_appends (request_id, seqno, payload, created_at_ms) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (request_id, seqno) DO NOTHING",
                (request_id, seqno, payload, now),
            )
            conn.execute("SELECT pg_notify(?, ?)", (APPENDS_CHANNEL, request_id))
            return cur.rowcount == 1

        return await self._run(job, f"storing append {seqno} of run {request_id!r}", write=True)

    async def fetch_appends(
        self, request_id: str, from_seqno: int
    ) -> tuple[tuple[int, bytes], ...]:
        """The run's stored client messages from `from_seqno` on, in order."""

        def read(conn: Conn) -> tuple[tuple[int, bytes], ...]:
            rows = conn.execute(
                "SELECT seqno, payload FROM run_appends WHERE request_id = ? AND seqno >= ? "
                "ORDER BY seqno",
                (request_id, from_seqno),
            ).fetchall()
            return tuple((int(r[0]), bytes(r[1])) for r in rows)

        return await self._run(read, f"reading the appends of run {request_id!r}", write=False)

    async def watch_appends(self, on_append: Callable[[str], None]) -> None:
        """Call `on_append(request_id)` for each append stored by any replica from now on."""
        await self._watch(APPENDS_CHANNEL, on_append)
