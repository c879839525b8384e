"""A run's inputs enter one at a time through its InputGate (transport/runtime/gate.py): in
arrival order, and a waiter canceled after being handed the gate passes it on."""

from __future__ import annotations

import asyncio

import pytest

from cursor_byok.transport.runtime.gate import InputGate


async def test_inputs_enter_one_at_a_time_in_arrival_order() -> None:
    gate = InputGate()
    inside: list[int] = []
    order: list[int] = []

    async def apply(n: int) -> None:
        async with gate:
            inside.append(n)
            assert len(inside) == 1  # nobody else is in
            order.append(n)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            inside.remove(n)

    await asyncio.gather(*(apply(n) for n in range(6)))
    assert order == list(range(6))
    assert not gate.busy


async def test_a_waiter_canceled_after_the_hand_over_passes_the_gate_on() -> None:
    gate = InputGate()
    entered: list[str] = []

    async def waiter(name: str) -> None:
        async with gate:
            entered.append(name)

    async with gate:
        second = asyncio.create_task(waiter("second"))
        third = asyncio.create_task(waiter("third"))
        await asyncio.sleep(0)  # both wait
    # leaving handed the gate to `second`, which is canceled before it runs: `third` gets in
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    await asyncio.wait_for(third, 1)
    assert entered == ["third"]
    assert not gate.busy


async def test_a_waiter_canceled_while_waiting_leaves_the_queue() -> None:
    gate = InputGate()
    release = asyncio.Event()

    async def holder() -> None:
        async with gate:
            await release.wait()

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    gone = asyncio.create_task(gate.__aenter__())
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    release.set()
    await first
    assert not gate.busy
    async with gate:  # free again at once
        assert gate.busy
