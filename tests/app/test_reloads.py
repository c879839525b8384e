"""reloads.py: the token and session lists are reloaded when a request comes and they are old,
never by a timer (issue 28: an idle server reloaded them every 2 s), and no request is answered
from a list older than `refresh_s`."""

from __future__ import annotations

import asyncio

from cursor_byok.reloads import Reloads


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_idle_nothing_then_the_first_request_waits_for_one_shared_reload() -> None:
    clock, started, gate = Clock(), [], asyncio.Event()

    async def load() -> None:
        started.append(clock.now)
        await gate.wait()

    reloads = Reloads(load, 2.0, "tokens", clock)
    reloads.loaded()
    await asyncio.sleep(0.05)
    assert reloads.refresh() is None and started == []  # fresh: nothing to do
    clock.now += 3600  # an hour idle: still nothing ran
    await asyncio.sleep(0)
    assert started == []
    first, second = reloads.refresh(), reloads.refresh()
    assert first is not None and first is second  # both requests wait for one reload
    await asyncio.sleep(0)
    assert len(started) == 1 and not first.done()
    gate.set()
    await first
    assert reloads.refresh() is None and reloads.loads == 1


async def test_past_three_quarters_a_reload_starts_in_the_background_unawaited() -> None:
    clock, loads = Clock(), []

    async def load() -> None:
        loads.append(clock.now)
        reloads.loaded()

    reloads = Reloads(load, 2.0, "tokens", clock)
    reloads.loaded()
    clock.now += 1.6
    assert reloads.refresh() is None  # the request goes on with the list it has
    await asyncio.sleep(0.01)
    assert loads == [clock.now]
    assert reloads.refresh() is None  # reloaded: fresh again


async def test_a_failed_reload_keeps_the_list_and_is_tried_again_later() -> None:
    clock, calls = Clock(), [0]

    async def load() -> None:
        calls[0] += 1
        raise OSError("database away")

    reloads = Reloads(load, 2.0, "tokens", clock)
    reloads.loaded()
    clock.now += 5
    task = reloads.refresh()
    assert task is not None
    await task  # logged, not raised into the request
    assert calls == [1] and reloads.refresh() is None
    clock.now += 2
    assert reloads.refresh() is not None
