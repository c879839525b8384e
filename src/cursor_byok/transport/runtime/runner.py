"""The runner: the runs of this process, one per client stream, and what they share.

A run holds its conversation while it drives it: a newer run of the same conversation tells
the holder to give way (`Supersede`, decided by the loop: the holder ends canceled) and takes
the conversation once the holder is gone. Across processes the store's version check decides;
replicas on one PostgreSQL also hear each other's claims (`on_claim`), so the holder on
another replica gives way at once rather than at its next commit.
The caches every run uses live here: committed states, client blobs, request bases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Protocol

from ...loop import SuspendCause
from ...store.api import LLMCallRecord
from ..connect.channel import RunChannel
from ..connect.run_info import RunStartInfo
from .access import TokenLimits
from .client_blobs import ClientBlobs
from .committed_states import CommittedStates
from .leases import ProcessLeases
from .request_bases import RequestBases
from .services import RunnerServices
from .subagents import Children
from .summary import CacheStats


class ActiveRun(Protocol):
    """What the runner needs of a run it handles (run.Run), without importing it: the runner
    sits below the run (an import-linter layer), which is given the runner it belongs to."""

    @property
    def channel(self) -> RunChannel: ...
    @property
    def ended(self) -> asyncio.Event: ...
    @property
    def person(self) -> str | None: ...
    async def serve(self) -> None: ...
    def close(self) -> None: ...
    def supersede(self) -> None: ...
    def suspend(self, cause: SuspendCause) -> None: ...
    def cancel_as_child(self) -> None: ...
    def show_helper_progress(self, frame: bytes) -> None: ...


class RunFactory(Protocol):
    """Makes the run of one client stream (run.Run); injected by the composition root."""

    def __call__(
        self,
        runner: Runner,
        channel: RunChannel,
        *,
        resumable: bool,
        token_id: str | None,
        headers: Mapping[str, str] | None,
    ) -> ActiveRun: ...


log = logging.getLogger("cursor_byok.runtime")


class Runner:
    """Handles runs; keeps at most one active run per conversation in this process."""

    def __init__(self, services: RunnerServices, new_run: RunFactory) -> None:
        self.services = services
        self._new_run = new_run
        self._active: dict[str, ActiveRun] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # This process's name in the claims it announces: its own come back to it and are
        # ignored (a newer run of this process has superseded the older one already).
        self.replica = uuid.uuid4().hex
        self._tasks: dict[ActiveRun, asyncio.Task[object]] = {}  # each run's handler task
        self._held: set[str] = set()  # conversations whose cross-replica hold this process has
        self._releases: dict[str, asyncio.Task[None]] = {}  # holds being let go
        self.committed_states = CommittedStates()
        self.client_blobs = ClientBlobs()
        self.request_bases = RequestBases()
        self.token_limits = TokenLimits(services.store, services.model_names, services.now_ms)
        self._run_tokens: dict[str, str] = {}  # request id -> person token id, while it runs
        self.children = Children()  # Task calls waiting for their child run
        self._ending: dict[str, set[asyncio.Event]] = {}  # helper_ended's waiters
        # This process's lease, named like its claims; the calls its runs plan carry it.
        self.leases = ProcessLeases(
            services.store,
            self.replica,
            now_ms=services.now_ms,
            on_llm_call=services.on_llm_call,
        )
        self._saving: set[asyncio.Task[None]] = set()  # records of runs that ended abruptly

    async def start(self) -> None:
        """Before serving: take this process's lease and finish the calls of processes that
        died with calls in flight (leases.py)."""
        await self.leases.start()

    async def close(self) -> None:
        """After the runs have ended (a graceful stop): their last records are saved, then
        this process's lease ends."""
        if self._saving:
            await asyncio.wait(set(self._saving), timeout=10)
        await self.leases.stop()

    def save_ended_calls(self, ended: list[LLMCallRecord]) -> None:
        """The records of calls a run ended as it stopped (ModelCalls.end_all), saved in the
        background (awaited by `close`); only over a "planned" record the store holds (a call
        planned in a commit that did not go through was never recorded)."""
        if not ended:
            return
        store = self.services.store

        async def save() -> None:
            for record in ended:
                try:
                    stored = await store.get_llm_call(record.call_id)
                    if stored is not None and stored.status == "planned":
                        await store.save_llm_call(record)
                except Exception as exc:  # the sweep of a later start finishes it instead
                    log.warning("could not record how call %s ended: %s", record.call_id, exc)

        task = asyncio.get_running_loop().create_task(save())
        self._saving.add(task)
        task.add_done_callback(self._saving.discard)

    @property
    def active_runs(self) -> int:
        return len(self._active)

    def cache_stats(self) -> list[CacheStats]:
        states, blobs, bases = self.committed_states, self.client_blobs, self.request_bases
        return [
            CacheStats("committed_states", len(states), states.size, states.hits, states.misses),
            CacheStats("client_blobs", len(blobs), blobs.size, blobs.hits, blobs.misses),
            CacheStats("request_bases", len(bases), bases.size, bases.hits, bases.misses),
        ]

    async def handle(self, channel: RunChannel, info: RunStartInfo | None = None) -> None:
        """The transport's run handler: one run per client stream."""
        headers: Mapping[str, str] = info.headers if info is not None else {}
        token_id = self.token_of_run(
            info.principal if info is not None else "", headers.get("x-parent-request-id", "")
        )
        run = self._new_run(
            self,
            channel,
            # Only the shim's RunSSE can be reopened under a known request_id; an HTTP/2 Run
            # always starts with the client's own run_request.
            resumable=info is None or info.transport != "run",
            token_id=token_id,
            headers=info.headers if info is not None else None,
        )
        request_id = channel.request_id
        if token_id is not None:
            self._run_tokens[request_id] = token_id
        task = asyncio.current_task()
        if task is not None:
            self._tasks[run] = task
        try:
            await run.serve()
        finally:
            self._tasks.pop(run, None)
            if self._run_tokens.get(request_id) == token_id:
                self._run_tokens.pop(request_id, None)
            run.close()

    def token_of_run(self, principal: str, parent_request_id: str = "") -> str | None:
        """The person token a run is made under: its own (`principal`, "" for none), except
        that a subagent's run without one of its own takes the token of the parent run that
        started it, while that parent runs in this process. Taking a token only adds limits
        and attribution, so a child never escapes its parent's; a child that authenticated with
        a token keeps it (the IDE sends the parent's). Subagents started by the server itself
        are to be made with their parent's `Run.token_id` (access.py)."""
        if principal:
            return principal
        return self._run_tokens.get(parent_request_id) if parent_request_id else None

    def unknown_event(self, kind: str) -> None:
        """A client message this server does not handle: counted, logged once per kind."""
        services = self.services
        if kind not in services.unknown_kinds:
            services.unknown_kinds.add(kind)
            log.info("the client sent %s, which this server does not handle (counted)", kind)
        if services.on_unknown_event is not None:
            try:
                services.on_unknown_event(kind)
            except Exception:
                log.exception("metrics: could not count a %s", kind)

    def helper_progress(self, parent_conversation_id: str, frame: bytes) -> None:
        """A helper's progress, for its parent's Task card: handed to the parent's run when it
        is going in this process (it sends it on its own stream)."""
        parent = self._active.get(parent_conversation_id)
        if parent is not None:
            parent.show_helper_progress(frame)

    def cancel_child(self, conversation_id: str, person: str | None = None) -> bool:
        """Cancel the run of a helper's conversation, when one is going here and its run is
        made for `person` (None: the operator, who may cancel any)."""
        run = self._active.get(conversation_id)
        if run is None or (person is not None and run.person != person):
            return False
        run.cancel_as_child()
        return True

    async def claim(self, run: ActiveRun, conversation_id: str) -> asyncio.Lock:
        """Make an older run of the same conversation give way, then hand out its lock."""
        old = self._active.get(conversation_id)
        if old is not None and old is not run:
            old.supersede()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(old.ended.wait(), self.services.supersede_timeout_s)
        self._active[conversation_id] = run
        if self.services.claims is not None:
            await self._claim_across_replicas(conversation_id, run.channel.request_id)
        return self._locks.setdefault(conversation_id, asyncio.Lock())

    async def _claim_across_replicas(self, conversation_id: str, request_id: str) -> None:
        """Tell the other replicas (their run of it gives way), then wait for its hold: the
        other replica lets go when its run has ended (or when it dies, with its connection).
        Past `supersede_timeout_s` the run goes on without it, as in-process: the version
        compare-and-set still decides."""
        claims = self.services.claims
        assert claims is not None
        try:
            await claims.announce_claim(conversation_id, f"{self.replica} {request_id}")
            if conversation_id in self._held:
                return
            if (letting_go := self._releases.get(conversation_id)) is not None:
                await letting_go  # an earlier run of it here lets go first, then we take it
            deadline = time.monotonic() + self.services.supersede_timeout_s
            while not await claims.hold_conversation(conversation_id):
                if time.monotonic() > deadline:
                    log.warning(
                        "a run of %r on another replica did not give way within %g s; "
                        "going on (the version check decides)",
                        conversation_id,
                        self.services.supersede_timeout_s,
                    )
                    return
                await asyncio.sleep(0.05)
            self._held.add(conversation_id)
        except Exception as exc:  # the compare-and-set still decides; say why it is late
            log.warning("could not claim %r across replicas: %s", conversation_id, exc)

    def _release_hold(self, conversation_id: str) -> None:
        claims = self.services.claims
        if claims is None:
            return

        async def release() -> None:
            try:
                await claims.release_conversation(conversation_id)
            except Exception as exc:  # a hold not let go ends with this process's connection
                log.warning("could not let go of %r: %s", conversation_id, exc)

        task = asyncio.get_running_loop().create_task(release())
        self._releases[conversation_id] = task

        def done(_: asyncio.Task[None]) -> None:
            if self._releases.get(conversation_id) is task:
                del self._releases[conversation_id]

        task.add_done_callback(done)

    def on_claim(self, conversation_id: str, claimant: str) -> None:
        """Another process took `conversation_id` (store.api.ConversationClaims; `claimant` is
        "<process> <request_id>"). A newer run of it: the run here gives way, ending canceled
        without committing, as when superseded in-process. The same run (its RunSSE reopened
        on the other replica): the run here stops as at a shutdown, deciding nothing, and the
        other replica resumes the turn from the store."""
        replica, _, request_id = claimant.partition(" ")
        if replica == self.replica:
            return
        run = self._active.get(conversation_id)
        if run is None:
            return
        if request_id and request_id == run.channel.request_id:
            task = self._tasks.get(run)
            if task is not None:
                log.info("run %s continues on another replica; stopping it here", request_id)
                run.suspend(SuspendCause.MOVED)
                # It ends by itself (its call recorded as moved); should it not, it is stopped.
                asyncio.get_running_loop().call_later(
                    self.services.supersede_timeout_s, _cancel_unless_done, task
                )
            return
        log.info("a run of %r started on another replica; this one gives way", conversation_id)
        run.supersede()

    async def helper_ended(self, conversation_id: str, timeout_s: float) -> None:
        """Wait until a run of `conversation_id` ends in this process, at most `timeout_s`."""
        ended = asyncio.Event()
        self._ending.setdefault(conversation_id, set()).add(ended)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), timeout_s)
        finally:
            waiting = self._ending.get(conversation_id)
            if waiting is not None:
                waiting.discard(ended)
                if not waiting:
                    del self._ending[conversation_id]

    def release(self, run: ActiveRun, conversation_id: str) -> None:
        for ended in self._ending.get(conversation_id, ()):
            ended.set()  # a parent waiting on this helper's end reads it now
        if self._active.get(conversation_id) is run:
            del self._active[conversation_id]
            if conversation_id in self._held:
                self._held.discard(conversation_id)
                self._release_hold(conversation_id)
            lock = self._locks.get(conversation_id)
            if lock is not None and not lock.locked():
                del self._locks[conversation_id]


def _cancel_unless_done(task: asyncio.Task[object]) -> None:
    if not task.done():
        task.cancel()
