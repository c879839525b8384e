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
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from ...store.appends import AppendLimits, AppendOutcome, StoredAppend
from .envelopes import ConnectError
from .ledger import size_text
from .session_registry import SessionRegistry, not_theirs
from .sessions import Session, TransportLimits

log = logging.getLogger(__name__)


class AppendRelay(Protocol):
    async def publish_append(
        self,
        request_id: str,
        seqno: int,
        payload: bytes,
        client: str = "",
        limits: AppendLimits | None = None,
        person: str | None = None,
    ) -> AppendOutcome: ...

    async def open_stream(
        self, request_id: str, client: str, limits: AppendLimits
    ) -> tuple[AppendOutcome, Sequence[StoredAppend]]: ...

    async def fetch_appends(self, request_id: str, from_seqno: int) -> Sequence[StoredAppend]: ...

    async def forget_appends(self, request_id: str) -> int: ...

    async def sweep_appends(self) -> int: ...

    async def watch_appends(
        self, on_append: Callable[[str], None], on_reconnect: Callable[[], None] | None = None
    ) -> None: ...

    async def find_run(self, request_id: str) -> object | None:
        """The stored run request of `request_id` (None: no run has started under it)."""
        ...


def append_limits(limits: TransportLimits) -> AppendLimits:
    """The stored appends' bounds, from the ones the transport holds in memory: per request
    id what one run may hold (its output bound, and 64 times its held appends: a run's
    appends stay stored until it ends), per client what its runs that have not started may."""
    return AppendLimits(
        request_rows=64 * limits.max_held_appends,
        request_bytes=limits.max_output_bytes,
        client_runs=limits.max_unstarted_per_client,
        client_bytes=limits.max_unstarted_bytes_per_client,
        waiting_ms=int(limits.unstarted_timeout * 1000),
    )


SWEEP_EVERY_S = 60.0
# A run's stored appends that cannot be read (the database is away) are read again this often,
# this many times: 30 s, past a run's unstarted timeout (10 s) and a database restart.
CATCH_UP_RETRY_S = 0.5
CATCH_UP_TRIES = 60  # stored appends nobody will read are deleted this often, at most


class RelayedAppends:
    """This replica's side of the relay: publish what it receives, deliver what its sessions
    hold a run for, and forget the stored appends of its runs that ended."""

    def __init__(
        self,
        relay: AppendRelay,
        registry: SessionRegistry,
        parse: Callable[[bytes], object],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.relay = relay
        self._registry = registry
        self._parse = parse
        self._limits = append_limits(registry.limits)
        self._clock = clock
        self._swept_at = clock()
        self._tasks: set[asyncio.Task[None]] = set()
        registry.on_run_end = self.run_ended

    async def publish(
        self,
        request_id: str,
        seqno: int,
        payload: bytes,
        message: object,
        client: str = "",
        person: str | None = None,
    ) -> None:
        """Store the append (then acknowledge it); hand it at once to a session of this
        replica when it holds the run. `person` sent it (None: the operator): another
        person's append to a run is refused wherever it lands, by this replica's session when
        it holds the run, else by the store, which knows the run's owner (`denied`)."""
        held = self._registry.find(request_id)
        if held is not None and not self._registry.may_join(held, person):
            raise not_theirs(request_id)
        try:
            outcome = await self.relay.publish_append(
                request_id, seqno, payload, client, self._limits, person
            )
        except Exception as exc:
            log.warning("run %s: could not store append %d: %s", request_id, seqno, exc)
            raise ConnectError(
                "unavailable", "the server could not store this message; send it again"
            ) from None
        if outcome == "full":
            log.warning(
                "run %s: append %d refused: the database is at its size cap", request_id, seqno
            )
            raise ConnectError(
                "unavailable",
                "the server's storage is full; try again once its operator has freed space",
            )
        if outcome == "denied":
            raise not_theirs(request_id)
        if outcome not in ("stored", "duplicate"):
            raise ConnectError("resource_exhausted", self._refusal(outcome))
        self._maybe_sweep()
        session = self._registry.find(request_id)
        if session is not None:
            session.append(seqno, payload, message)

    def _refusal(self, outcome: str) -> str:
        lim = self._limits
        if outcome == "request_full":
            return (
                f"the messages stored for this run would pass {lim.request_rows} or "
                f"{size_text(lim.request_bytes)}"
            )
        if outcome == "client_runs":
            return (
                f"this client already has {lim.client_runs} runs waiting for their first "
                "message; start them (or let them expire) first"
            )
        return (
            "runs of this client that have not started would hold more than "
            f"{size_text(lim.client_bytes)}"
        )

    def run_ended(self, session: Session) -> None:
        """A run of this replica ended: its stored appends are forgotten, unless it may go on
        (it never started, or ended `unavailable`: a RunSSE reopened here or elsewhere reads
        them again)."""
        ending = session.ending
        if not session.started or (ending is not None and ending.code == "unavailable"):
            return
        self._background(self._forget(session.request_id))

    async def _forget(self, request_id: str) -> None:
        try:
            await self.relay.forget_appends(request_id)
        except Exception as exc:  # the sweep deletes them later
            log.warning("run %s: could not delete its stored appends: %s", request_id, exc)

    def _maybe_sweep(self) -> None:
        now = self._clock()
        if now - self._swept_at < SWEEP_EVERY_S:
            return
        self._swept_at = now
        self._background(self._sweep())

    async def _sweep(self) -> None:
        try:
            await self.relay.sweep_appends()
        except Exception as exc:
            log.warning("could not sweep the stored appends: %s", exc)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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

    def resync(self) -> None:
        """The database's announcements were missed for a while (its listener reconnected):
        every run of this replica reads the appends stored meanwhile."""
        for session in self._registry.live():
            self.catch_up(session)

    def opened(self, session: Session, client: str) -> None:
        """A RunSSE opened a new session here: in the background (no wait before the stream
        starts), the run counts as waiting on `client`'s allowance shared by every replica, in
        the transaction that reads its stored appends; past that allowance it fails with
        `resource_exhausted`, as the local ledger would refuse it."""
        self._background(self._open(session, client))

    async def _open(self, session: Session, client: str) -> None:
        try:
            outcome, stored = await self.relay.open_stream(session.request_id, client, self._limits)
        except Exception as exc:
            log.warning("run %s: could not open its stream: %s", session.request_id, exc)
            await self._catch_up(session)  # what was stored, read again while the run waits
            return
        if outcome == "client_runs" and not session.started:
            session.fail(ConnectError("resource_exhausted", self._refusal(outcome)))
            return
        self._deliver(session, stored)

    def catch_up(self, session: Session) -> None:
        """Deliver the session's stored appends it has not had yet (in the background)."""
        self._background(self._catch_up(session))

    async def _catch_up(self, session: Session) -> None:
        for attempt in range(CATCH_UP_TRIES):
            try:
                stored = await self.relay.fetch_appends(session.request_id, session.next_seqno)
                break
            except Exception as exc:
                # The database is away (a restart): try again while the run waits, so what was
                # stored and acknowledged reaches it once the database is back.
                log.warning(
                    "run %s: could not read its stored appends: %s", session.request_id, exc
                )
                if session.finished or attempt == CATCH_UP_TRIES - 1:
                    return
                await asyncio.sleep(CATCH_UP_RETRY_S)
        self._deliver(session, stored)

    def _deliver(self, session: Session, stored: Sequence[StoredAppend]) -> None:
        for seqno, payload, person in stored:
            if not self._registry.may_join(session, person):
                # Stored by a replica before the run's owner was known there (its first
                # append came from someone else): never the run's input.
                log.warning(
                    "run %s: stored append %d is another person's", session.request_id, seqno
                )
                continue
            try:
                session.append(seqno, payload, self._parse(payload))
            except (ConnectError, ValueError) as exc:
                log.warning("run %s: stored append %d refused: %s", session.request_id, seqno, exc)
