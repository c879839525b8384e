"""The sessions of one server process by request id (sessions.py has one session): found,
joined by the same person only, created within the transport's limits, their handlers run,
and the finished ones forgotten as they age or as room is needed."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from .channel import EndError, Gone, StreamGone
from .envelopes import ConnectError
from .ledger import Ledger, LedgerLimits
from .limits import TransportLimits
from .run_info import FORWARDED_HEADERS, PRINCIPAL_HEADER, RunHandler, RunStartInfo, Transport
from .sessions import Session

log = logging.getLogger("cursor_byok.transport.connect.sessions")  # its lines as before


def not_theirs(request_id: str) -> ConnectError:
    return ConnectError(
        "permission_denied", f"request_id {request_id!r} belongs to a run someone else started"
    )


class SessionRegistry:
    """All live and recently finished runs, keyed by request_id."""

    def __init__(
        self,
        handler: RunHandler,
        limits: TransportLimits | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        error_details_type: str = "",
        parse: Callable[[bytes], object] | None = None,
        person_of: Callable[[str], str] | None = None,
    ) -> None:
        """`parse`: the service's parser of client messages (see `Session`). `person_of`: the
        person of a principal (PRINCIPAL_HEADER), for who may join a session."""
        self._handler = handler
        self._person_of = person_of or (lambda principal: principal)
        self._parse = parse
        self._details_type = error_details_type
        self.limits = limits or TransportLimits()
        self._clock = clock
        # Told of every run's end (relay.py forgets a run's stored appends then).
        self.on_run_end: Callable[[Session], None] | None = None
        self._sessions: dict[str, Session] = {}
        self._finished: dict[str, Session] = {}  # in the order they finished
        lim = self.limits
        self.ledger = Ledger(
            LedgerLimits(
                lim.max_buffered_bytes,
                lim.max_unstarted_per_client,
                lim.max_unstarted_bytes_per_client,
            ),
            lambda need: self._forget_finished(need=need),
        )
        self._reaper: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, request_id: str) -> Session | None:
        return self._sessions.get(request_id)

    def start(self) -> None:
        """Start the reaper (idempotent; needs a running loop)."""
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_loop())

    async def close(self) -> None:
        """Shutdown: every client is told `unavailable` (a shim client reconnects to the
        server that comes next); each run that watches is told the server stops and ends by
        itself, recording its calls, within `stop_grace`; the rest are cancelled."""
        if self._reaper is not None:
            self._reaper.cancel()
        stopping: list[asyncio.Task[None]] = []
        shutting_down = ConnectError("unavailable", "server shutting down")
        for s in list(self._sessions.values()):
            if s.finished:
                continue
            if s.watched and s.task is not None:
                stopping.append(s.task)
            s.lose(StreamGone(Gone.SHUTDOWN))
            s._finish(shutting_down)  # the client's ending; the run ends by itself
        if stopping:
            await asyncio.wait(stopping, timeout=self.limits.stop_grace)
        for s in list(self._sessions.values()):
            s.fail(shutting_down)
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        for rid in list(self._sessions):
            self._remove(rid)

    def find(self, request_id: str) -> Session | None:
        """The shim session of `request_id` held here, if any (never creates one)."""
        session = self._sessions.get(request_id)
        return session if session is not None and session.transport == "runsse" else None

    def _may_join(self, session: Session, headers: Mapping[str, str] | None) -> None:
        """A stream reopened or an append to a run belongs to the person who started the run,
        or to the operator (no principal: the server's own token, or an open server), who may
        join any; another person's token is refused (ownership, issue 25)."""
        joiner = (headers or {}).get(PRINCIPAL_HEADER, "")
        info = session.info
        if info is None or not joiner or joiner == info.principal:
            return
        if not self.may_join(session, self._person_of(joiner)):
            raise not_theirs(session.request_id)

    def person_of(self, principal: str) -> str | None:
        """The person of a request's principal; None for the operator (no principal)."""
        return self._person_of(principal) if principal else None

    def may_join(self, session: Session, person: str | None) -> bool:
        """Whether `person` (None: the operator) may append to the session's run: the person
        of the principal it was started under, or the operator."""
        info = session.info
        if person is None or info is None:
            return True
        return bool(info.principal) and self._person_of(info.principal) == person

    def get_or_create(
        self,
        request_id: str,
        transport: Transport,
        headers: Mapping[str, str] | None = None,
        client: str = "",
        *,
        first_message: bool = False,
    ) -> tuple[Session, bool]:
        """The session for `request_id`, created (and its handler started) if new. `client`:
        whose allowance a new run counts against (ledger.client_key) while it waits for its
        first message; `first_message`: the caller delivers that message right away."""
        session = self._sessions.get(request_id)
        if session is not None:
            self._may_join(session, headers)
            if session.transport != transport:
                raise ConnectError(
                    "failed_precondition",
                    f"request_id {request_id!r} belongs to a {session.transport} stream",
                )
            if headers and session.info is not None:
                for name in FORWARDED_HEADERS:
                    if name in headers:
                        session.info.headers.setdefault(name, headers[name])
            return session, False
        if len(self._sessions) >= self.limits.max_sessions:
            self._forget_finished(entries=len(self._sessions) - self.limits.max_sessions + 1)
            if len(self._sessions) >= self.limits.max_sessions:
                self.reap()
            if len(self._sessions) >= self.limits.max_sessions:
                raise ConnectError(
                    "resource_exhausted", f"too many runs (limit {self.limits.max_sessions})"
                )
        self.ledger.admit(client, waiting=not first_message)
        self.start()
        session = Session(
            request_id,
            transport,
            max_held=self.limits.max_held_appends,
            max_held_bytes=self.limits.max_held_bytes,
            max_output_bytes=self.limits.max_output_bytes,
            clock=self._clock,
            error_details_type=self._details_type,
            client=client,
            ledger=self.ledger,
            on_finish=self._finished_now,
            waiting=not first_message,
            parse=self._parse,
        )
        self._sessions[request_id] = session
        info = RunStartInfo(
            request_id=request_id,
            transport=transport,
            headers={k: v for k, v in (headers or {}).items() if k in FORWARDED_HEADERS},
            principal=(headers or {}).get(PRINCIPAL_HEADER, ""),
        )
        session.info = info
        task = asyncio.get_running_loop().create_task(self._run(session, info))
        session.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return session, True

    async def _run(self, session: Session, info: RunStartInfo) -> None:
        try:
            await self._handler(session, info)
        except asyncio.CancelledError:
            session.finish(EndError("canceled", "run cancelled"))
        except Exception as exc:
            log.exception("run %s: handler failed", session.request_id)
            session.finish(EndError("internal", f"run failed: {type(exc).__name__}"))
        else:
            if not session.finished:
                log.error("run %s: handler returned without finish()", session.request_id)
                session.finish(EndError("internal", "run ended without a result"))

    def live(self) -> list[Session]:
        """The runs that have not finished."""
        return [s for s in self._sessions.values() if not s.finished]

    def _finished_now(self, session: Session) -> None:
        if self._sessions.get(session.request_id) is session:
            self._finished[session.request_id] = session
        if self.on_run_end is not None:
            try:
                self.on_run_end(session)
            except Exception:  # the transport goes on
                log.exception("run %s: its end's listener failed", session.request_id)

    def _remove(self, request_id: str) -> None:
        session = self._sessions.pop(request_id)
        self._finished.pop(request_id, None)
        self.ledger.forget(session)

    def _forget_finished(self, *, entries: int = 0, need: int = 0) -> None:
        """Forget finished runs nobody is reading, oldest first, until `entries` runs and
        `need` bytes are free: their output is kept only for a replay that may never come."""
        gone: list[str] = []
        for rid, s in self._finished.items():
            if entries <= 0 and need <= 0:
                break
            if s.subscribers == 0:
                gone.append(rid)
                entries -= 1
                need -= s.cost
        for rid in gone:
            self._remove(rid)

    def reap(self) -> None:
        now = self._clock()
        lim = self.limits
        for rid, s in list(self._sessions.items()):
            if s.finished:
                assert s.finished_at is not None
                if s.subscribers == 0 and now - s.finished_at >= lim.finished_grace:
                    self._remove(rid)
            elif not s.started and now - s.created_at >= lim.unstarted_timeout:
                # e.g. a RunSSE for an unknown or long-gone request_id, or appends whose
                # append_seqno 0 never comes: nothing will ever start
                log.info("run %s: no first client message, giving up", rid)
                late = f"no run request arrived within {lim.unstarted_timeout:g} s"
                s.fail(ConnectError("deadline_exceeded", late))
                if s.subscribers == 0:
                    self._remove(rid)
            elif s.gone_at is not None:
                # Told its client is gone: it ends by itself, or here, past the stop grace.
                if now - s.gone_at >= lim.stop_grace:
                    log.warning(
                        "run %s: still going %g s after its client went away; cancelling",
                        rid,
                        lim.stop_grace,
                    )
                    s.fail(ConnectError("canceled", "client went away"))
            elif s.subscribers == 0 and now - s.detached_at >= lim.orphan_timeout:
                if s.watched and s.gone is None:
                    log.info("run %s: no client for %.0f s, ending it", rid, lim.orphan_timeout)
                    s.lose(StreamGone(Gone.EXPIRED, grace_s=lim.orphan_timeout))
                else:
                    log.info("run %s: no client for %.0f s, cancelling", rid, lim.orphan_timeout)
                    s.fail(ConnectError("canceled", "client went away"))

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self.limits.reap_interval)
            try:
                self.reap()
            except Exception:  # pragma: no cover - defensive
                log.exception("session reaper failed")
