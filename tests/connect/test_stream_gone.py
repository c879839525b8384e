"""A run is told when its client's stream is gone for good (`RunChannel.watch_gone`) and ends
by itself: a `RunSSE` not reopened within its reconnect grace (`orphan_timeout`), every run
at shutdown (its client told `unavailable` first), a transport failure. A run that does not
watch, or does not end within `stop_grace`, has its task cancelled as before. An HTTP/2 `Run`
closed by its client: over real HTTP/2 in tests/e2e/test_cancel_reaches_the_provider.py."""

from __future__ import annotations

import asyncio

from cursor_byok.transport.connect.channel import Gone, RunChannel, StreamGone
from cursor_byok.transport.connect.envelopes import ConnectError
from cursor_byok.transport.connect.session_registry import SessionRegistry
from cursor_byok.transport.connect.sessions import RunStartInfo, Session, TransportLimits
from tests.support.connect_client import run_request

LIMITS = TransportLimits(orphan_timeout=30, stop_grace=5)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Watching:
    """A run handler that watches its stream, ends itself `ends_after` s after it is told
    (None: never), and notes whether its task was cancelled."""

    def __init__(self, ends_after: float | None = 0.0) -> None:
        self.told: list[StreamGone] = []
        self.cancelled = False
        self.ends_after = ends_after
        self._told = asyncio.Event()

    async def __call__(self, channel: RunChannel, info: RunStartInfo) -> None:
        def gone(why: StreamGone) -> None:
            self.told.append(why)
            self._told.set()

        channel.watch_gone(gone)
        try:
            await self._told.wait()
            if self.ends_after is None:
                await asyncio.Event().wait()
            await asyncio.sleep(self.ends_after)
            channel.finish(None)
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def started(reg: SessionRegistry, rid: str = "r") -> Session:
    s, _ = reg.get_or_create(rid, "runsse")
    s.append(0, run_request().SerializeToString(), run_request())
    await asyncio.sleep(0)
    return s


async def test_a_runsse_not_reopened_within_its_grace_is_told_and_ends_itself() -> None:
    clock = Clock()
    run = Watching()
    reg = SessionRegistry(run, LIMITS, clock=clock)
    s = await started(reg)
    s.attach()
    s.detach()  # the client's RunSSE dropped: the grace starts
    clock.now += 29
    reg.reap()
    assert run.told == [] and not s.finished
    s.attach()  # reopened within the grace: nothing happens
    clock.now += 100
    reg.reap()
    s.detach()
    clock.now += 31
    reg.reap()
    assert run.told == [StreamGone(Gone.EXPIRED, grace_s=30)]
    reg.reap()  # told once
    assert len(run.told) == 1
    await asyncio.sleep(0.01)
    assert s.finished and s.ending is None  # it ended by itself, not cancelled
    assert not run.cancelled
    await reg.close()


async def test_a_run_still_going_past_the_stop_grace_is_cancelled() -> None:
    clock = Clock()
    run = Watching(ends_after=None)
    reg = SessionRegistry(run, LIMITS, clock=clock)
    s = await started(reg)
    clock.now += 31
    reg.reap()
    assert run.told == [StreamGone(Gone.EXPIRED, grace_s=30)]
    clock.now += 4
    reg.reap()
    assert not s.finished
    clock.now += 2
    reg.reap()
    assert s.finished and s.ending is not None and s.ending.code == "canceled"
    await asyncio.sleep(0.01)
    assert run.cancelled
    await reg.close()


async def test_a_stream_gone_before_the_run_watches_is_told_when_it_does() -> None:
    s = Session("r", "run")
    s.lose(StreamGone(Gone.CLOSED))
    s.lose(StreamGone(Gone.EXPIRED))  # the first cause stays
    told: list[StreamGone] = []
    s.watch_gone(told.append)
    assert told == [StreamGone(Gone.CLOSED)] and s.gone_at is not None
    s.finish()
    s.lose(StreamGone(Gone.CLOSED))
    assert told == [StreamGone(Gone.CLOSED)]


async def test_a_transport_failure_tells_the_run_why_before_cancelling_it() -> None:
    run = Watching(ends_after=None)
    reg = SessionRegistry(run, LIMITS)
    s = await started(reg)
    s.fail(ConnectError("resource_exhausted", "the run's output exceeds 1 MiB"))
    await asyncio.sleep(0.01)
    assert run.told == [StreamGone(Gone.FAILED, detail="the run's output exceeds 1 MiB")]
    assert run.cancelled
    await reg.close()


async def test_shutdown_tells_each_run_after_its_client_hears_unavailable() -> None:
    quick, stuck = Watching(ends_after=0.05), Watching(ends_after=None)
    handlers = {"quick": quick, "stuck": stuck}

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        await handlers[info.request_id](channel, info)

    reg = SessionRegistry(handler, TransportLimits(stop_grace=0.3))
    a, b = await started(reg, "quick"), await started(reg, "stuck")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await reg.close()
    took = loop.time() - t0
    for s, run in ((a, quick), (b, stuck)):
        assert run.told == [StreamGone(Gone.SHUTDOWN)]
        assert s.ending is not None and s.ending.code == "unavailable"
    assert not quick.cancelled  # it ended by itself
    assert stuck.cancelled  # cancelled once the stop grace passed
    assert 0.25 <= took < 2, took


async def test_a_run_that_does_not_watch_is_cancelled_as_before() -> None:
    clock = Clock()
    cancelled = asyncio.Event()

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    reg = SessionRegistry(handler, LIMITS, clock=clock)
    s = await started(reg)
    s.lose(StreamGone(Gone.CLOSED))  # unwatched: nothing yet
    clock.now += 10
    reg.reap()
    assert not s.finished
    clock.now += 21
    reg.reap()
    assert s.finished and s.ending is not None and s.ending.code == "canceled"
    await asyncio.wait_for(cancelled.wait(), 1)
    await reg.close()
