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

from ..appends import AppendLimits, AppendOutcome, StoredAppend
from ..sql import Conn
from . import appends
from .replicas import APPENDS_CHANNEL, CLAIMS_CHANNEL, Holds, Watcher, lock_key
from .size import SizeCap

T = TypeVar("T")


class ReplicaSignals:
    """Claims, holds and appends over the store's own connections."""

    url: str
    _closed: bool
    _clock: Callable[[], int]
    _watchers: list[Watcher]
    _holds: Holds
    _holds_executor: ThreadPoolExecutor
    size_cap: SizeCap

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

    async def _watch(
        self,
        channel: str,
        on_payload: Callable[[str], None],
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        self._check_open()
        watcher = Watcher(self.url, channel, on_payload, on_reconnect)
        self._watchers.append(watcher)
        await watcher.start()

    # ------------------------------------------------------------------ appends (replicas)

    async def publish_append(
        self,
        request_id: str,
        seqno: int,
        payload: bytes,
        client: str = "",
        limits: AppendLimits | None = None,
        person: str | None = None,
    ) -> AppendOutcome:
        """Store one client message of a shim run within `limits`, sent by `person` (None:
        the operator), then NOTIFY every replica (in the same transaction: the notification
        goes out once the row is committed)."""
        now = self._clock()
        full = self.size_cap.full
        return await self._run(
            lambda conn: appends.publish(
                conn, request_id, seqno, payload, client, limits, now, full=full, person=person
            ),
            f"storing append {seqno} of run {request_id!r}",
            write=True,
        )

    async def open_stream(
        self, request_id: str, client: str, limits: AppendLimits
    ) -> tuple[AppendOutcome, tuple[StoredAppend, ...]]:
        """A RunSSE opened: the run waits on `client`'s allowance shared by every replica
        (`client_runs`: it is full), and its stored appends so far (postgres/appends.py)."""
        now = self._clock()
        return await self._run(
            lambda conn: appends.open_stream(conn, request_id, client, limits, now),
            f"opening the stream of run {request_id!r}",
            write=True,
            durable=False,
        )

    async def fetch_appends(self, request_id: str, from_seqno: int) -> tuple[StoredAppend, ...]:
        """The run's stored client messages from `from_seqno` on, in order."""
        return await self._run(
            lambda conn: appends.fetch(conn, request_id, from_seqno),
            f"reading the appends of run {request_id!r}",
            write=False,
        )

    async def forget_appends(self, request_id: str) -> int:
        """Delete the run's stored client messages (its run ended: nobody will read them)."""
        return await self._run(
            lambda conn: appends.forget(conn, request_id),
            f"deleting the appends of run {request_id!r}",
            write=True,
        )

    async def sweep_appends(self) -> int:
        """Delete the stored client messages nobody will read (postgres/appends.py)."""
        now = self._clock()
        return await self._run(
            lambda conn: appends.sweep(conn, now), "sweeping run appends", write=True
        )

    async def watch_appends(
        self, on_append: Callable[[str], None], on_reconnect: Callable[[], None] | None = None
    ) -> None:
        """Call `on_append(request_id)` for each append stored by any replica from now on, and
        `on_reconnect()` when listening again after a lost connection (what was stored in
        between was not announced here)."""
        await self._watch(APPENDS_CHANNEL, on_append, on_reconnect)
