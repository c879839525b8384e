"""Shim appends between replicas: a `BidiAppend` may reach a replica other than the one that
holds its run's `RunSSE` (several servers behind one balancer, one PostgreSQL).

With a relay, an append is stored first (the relay's store, keyed by request id and
append_seqno, so a message sent twice is kept once), then acknowledged; it never starts a run
where it lands. Every replica hears that a run has a new append; the one holding the run's
session reads what it has not delivered yet and hands it to the session, which orders and
dedupes by append_seqno as it does for appends received directly. A `RunSSE` opened (or
reopened, after the replica that held it died) reads the run's stored appends from the start,
so the appends that came before it, or went to the dead replica, are not lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from .envelopes import ConnectError
from .sessions import Session, SessionRegistry

log = logging.getLogger(__name__)


class AppendRelay(Protocol):
    async def publish_append(self, request_id: str, seqno: int, payload: bytes) -> bool: ...

    async def fetch_appends(
        self, request_id: str, from_seqno: int
    ) -> Sequence[tuple[int, bytes]]: ...

    async def watch_appends(self, on_append: Callable[[str], None]) -> None: ...

    async def find_run(self, request_id: str) -> object | None:
        """The stored run request of `request_id` (None: no run has started under it)."""
        ...


class RelayedAppends:
    """This replica's side of the relay: publish what it receives, deliver what its sessions
    hold a run for."""

    def __init__(
        self, relay: AppendRelay, registry: SessionRegistry, parse: Callable[[bytes], object]
    ) -> None:
        self.relay = relay
        self._registry = registry
        self._parse = parse
        self._tasks: set[asyncio.Task[None]] = set()

    async def publish(self, request_id: str, seqno: int, payload: bytes, message: object) -> None:
        """Store the append (then acknowledge it); hand it at once to a session of this
        replica when it holds the run."""
        try:
            await self.relay.publish_append(request_id, seqno, payload)
        except Exception as exc:
            log.warning("run %s: could not store append %d: %s", request_id, seqno, exc)
            raise ConnectError(
                "unavailable", "the server could not store this message; send it again"
            ) from None
        session = self._registry.find(request_id)
        if session is not None:
            session.append(seqno, payload, message)

    async def run_started(self, request_id: str) -> bool:
        """Whether a run started under `request_id` on some replica (its request is stored)."""
        try:
            return await self.relay.find_run(request_id) is not None
        except Exception as exc:
            log.warning("run %s: could not look it up: %s", request_id, exc)
            raise ConnectError("unavailable", "the server could not check this run") from None

    def heard(self, request_id: str) -> None:
        """Some replica stored an append of `request_id`."""
        session = self._registry.find(request_id)
        if session is not None:
            self.catch_up(session)

    def catch_up(self, session: Session) -> None:
        """Deliver the session's stored appends it has not had yet (in the background)."""
        task = asyncio.get_running_loop().create_task(self._catch_up(session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _catch_up(self, session: Session) -> None:
        try:
            stored = await self.relay.fetch_appends(session.request_id, session.next_seqno)
        except Exception as exc:
            log.warning("run %s: could not read its stored appends: %s", session.request_id, exc)
            return
        for seqno, payload in stored:
            try:
                session.append(seqno, payload, self._parse(payload))
            except (ConnectError, ValueError) as exc:
                log.warning("run %s: stored append %d refused: %s", session.request_id, seqno, exc)
