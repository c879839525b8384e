"""Session registry without HTTP: ordering, duplicates, limits, replay state, lifetimes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cursor_byok.transport.connect.channel import EndError, RunChannel
from cursor_byok.transport.connect.envelopes import ConnectError
from cursor_byok.transport.connect.session_registry import SessionRegistry
from cursor_byok.transport.connect.sessions import RunStartInfo, Session, TransportLimits
from cursor_byok.transport.cursor.proto import agent_pb2
from tests.support.connect_client import cancel, heartbeat, run_request, text_delta


def wire(message: Any) -> tuple[bytes, object]:
    """A client message as the transport hands it over: its bytes and the parsed message."""
    return message.SerializeToString(), message


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def kinds(items: list[tuple[str, str]]) -> list[str]:
    return [f"{i} {k}" for i, k in items]


async def drain(session: Session) -> list[tuple[str, str]]:
    out = []
    while not session._inbox.empty():
        item = await session.receive()
        if item is None:
            break
        out.append((item.input_id, str(item.message.WhichOneof("message"))))
    return out


async def test_out_of_order_and_duplicates() -> None:
    s = Session("r", "runsse")
    assert s.append(2, *wire(heartbeat()))
    assert s.append(1, *wire(heartbeat()))
    assert not s.append(2, *wire(heartbeat()))  # duplicate while held
    assert await drain(s) == []
    assert s.append(0, *wire(run_request()))
    assert not s.append(0, *wire(run_request()))  # duplicate after delivery
    assert not s.append(1, *wire(heartbeat()))
    assert s.append(3, *wire(cancel()))
    got = await drain(s)
    assert [g[0] for g in got] == ["r:0", "r:1", "r:2", "r:3"]
    assert got[0][1] == "run_request" and got[3][1] == "conversation_action"
    assert s.duplicates == 3 and s.held == 0


async def test_a_run_read_from_the_store_goes_on_with_the_clients_numbering() -> None:
    """A shim run reopened after a restart: the client goes on counting from its appends to
    the server that is gone, so its next append is the next input, whatever its number."""
    s = Session("r", "runsse")
    s.continue_client_numbering()
    assert s.next_seqno == 1  # position 0 is the stored run request
    assert not s.append(0, *wire(run_request()))  # the run request again: a duplicate
    assert s.append(7, *wire(heartbeat()))
    assert s.append(9, *wire(cancel()))  # held: 8 is still to come
    assert not s.append(5, *wire(heartbeat()))  # behind where the client's count stood
    assert [i for i, _ in await drain(s)] == ["r:7"]
    assert s.append(8, *wire(heartbeat()))
    assert [i for i, _ in await drain(s)] == ["r:8", "r:9"]
    assert s.held == 0 and s.next_seqno == 10 and s.duplicates == 2


async def test_appends_held_before_the_stored_request_was_found_are_delivered() -> None:
    s = Session("r", "runsse")
    assert s.append(4, *wire(heartbeat()))  # arrived while the store was being asked
    assert s.append(3, *wire(heartbeat()))
    assert await drain(s) == []
    s.continue_client_numbering()
    assert [i for i, _ in await drain(s)] == ["r:3", "r:4"]
    assert s.append(5, *wire(cancel()))
    assert [i for i, _ in await drain(s)] == ["r:5"]
    assert s.held == 0 and s.next_seqno == 6


async def test_held_limit_and_bad_seqno() -> None:
    s = Session("r", "runsse", max_held=3)
    for n in (5, 6, 7):
        s.append(n, *wire(heartbeat()))
    with pytest.raises(ConnectError) as exc:
        s.append(8, *wire(heartbeat()))
    assert exc.value.code == "resource_exhausted"
    with pytest.raises(ConnectError) as exc:
        s.append(-1, *wire(heartbeat()))
    assert exc.value.code == "invalid_argument"
    with pytest.raises(ConnectError):
        s.append(1, *wire(heartbeat()))  # still above the gap, and the hold is full
    assert s.append(0, *wire(run_request()))  # the gap filler is always taken
    assert [i for i, _ in await drain(s)] == ["r:0"]
    assert s.held == 3 and s.next_seqno == 1


async def test_receive_none_after_close_forever() -> None:
    s = Session("r", "run")
    s.push(*wire(run_request()))
    s.close_input()
    s.push(*wire(heartbeat()))  # ignored: input is closed
    first = await s.receive()
    assert first is not None and first.input_id == "r:0"
    assert await s.receive() is None
    assert await s.receive() is None


async def test_history_send_after_finish_and_wait() -> None:
    s = Session("r", "runsse", error_details_type="aiserver.v1.ErrorDetails")
    s.send(text_delta("a").SerializeToString())
    assert len(s.history) == 1
    waiter = asyncio.create_task(s.wait(1, 5))
    await asyncio.sleep(0)
    s.send(text_delta("b").SerializeToString())
    await asyncio.wait_for(waiter, 1)
    s.finish(EndError("unavailable", "x", b"\x08\x39"))
    s.send(text_delta("late").SerializeToString())
    assert len(s.history) == 2
    assert s.finished and s.ending is not None and s.ending.code == "unavailable"
    assert s.ending.details[0].type == "aiserver.v1.ErrorDetails"
    s.finish()  # idempotent: the first ending stays
    assert s.ending.code == "unavailable"
    channel: RunChannel = s  # structurally a RunChannel (checked by mypy)
    assert channel.request_id == "r"


async def test_wait_times_out() -> None:
    s = Session("r", "run")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await s.wait(0, 0.05)
    assert loop.time() - t0 >= 0.04


async def test_registry_get_or_create_and_handler_lifecycle() -> None:
    seen: list[RunStartInfo] = []
    release = asyncio.Event()

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        seen.append(info)
        await release.wait()
        channel.finish()

    reg = SessionRegistry(handler, TransportLimits(max_sessions=2))
    a, created = reg.get_or_create(
        "a", "runsse", {"x-cursor-client-version": "2.1", "cookie": "no"}
    )
    assert created
    again, created = reg.get_or_create("a", "runsse")
    assert again is a and not created
    with pytest.raises(ConnectError) as exc:
        reg.get_or_create("a", "run")
    assert exc.value.code == "failed_precondition"
    reg.get_or_create("b", "run")
    with pytest.raises(ConnectError) as exc:
        reg.get_or_create("c", "run")
    assert exc.value.code == "resource_exhausted"
    await asyncio.sleep(0)
    assert seen[0].headers == {"x-cursor-client-version": "2.1"}
    assert seen[0].transport == "runsse" and seen[0].request_id == "a"
    release.set()
    await asyncio.sleep(0.01)
    assert a.finished and a.ending is None
    await reg.close()


async def test_handler_failures_become_end_errors() -> None:
    async def crash(channel: RunChannel, info: RunStartInfo) -> None:
        raise RuntimeError("boom")

    async def forgetful(channel: RunChannel, info: RunStartInfo) -> None:
        return None

    for handler in (crash, forgetful):
        reg = SessionRegistry(handler)
        s, _ = reg.get_or_create("r", "run")
        assert s.task is not None
        await s.task
        assert s.ending is not None and s.ending.code == "internal"
        await reg.close()


async def test_grace_and_orphan_reaping() -> None:
    clock = Clock()
    cancelled = asyncio.Event()

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    limits = TransportLimits(finished_grace=120, orphan_timeout=30)
    reg = SessionRegistry(handler, limits, clock=clock)
    live, _ = reg.get_or_create("live", "runsse")
    done, _ = reg.get_or_create("done", "runsse")
    done.finish()
    await asyncio.sleep(0)  # let the handlers start
    live.append(0, *wire(run_request()))
    live.attach()
    clock.now += 100
    reg.reap()
    assert reg.get("done") is not None and not live.finished
    clock.now += 21
    reg.reap()
    assert reg.get("done") is None  # past the grace period
    live.detach()  # orphan clock starts now
    clock.now += 29
    reg.reap()
    assert not live.finished
    clock.now += 2
    reg.reap()
    assert live.finished and live.ending is not None and live.ending.code == "canceled"
    await asyncio.wait_for(cancelled.wait(), 1)
    await reg.close()


async def test_finished_session_kept_while_subscribed() -> None:
    clock = Clock()

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        channel.finish()

    reg = SessionRegistry(handler, TransportLimits(finished_grace=1), clock=clock)
    s, _ = reg.get_or_create("r", "runsse")
    await asyncio.sleep(0)
    s.attach()
    clock.now += 10
    reg.reap()
    assert reg.get("r") is s
    s.detach()
    reg.reap()
    assert reg.get("r") is None
    await reg.close()


def test_message_types() -> None:
    assert agent_pb2.AgentClientMessage.FromString(heartbeat().SerializeToString()).HasField(
        "client_heartbeat"
    )


async def test_run_without_first_message_is_dropped() -> None:
    clock = Clock()

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        await channel.receive()

    limits = TransportLimits(first_message_timeout=60, orphan_timeout=1000)
    reg = SessionRegistry(handler, limits, clock=clock)
    waiting, _ = reg.get_or_create("waiting", "runsse")
    started, _ = reg.get_or_create("started", "runsse")
    waiting.attach()  # a RunSSE is open, but append 0 never comes
    waiting.append(3, *wire(heartbeat()))  # a later append alone does not count
    started.append(0, *wire(run_request()))
    clock.now += 61
    reg.reap()
    assert waiting.ending is not None and waiting.ending.code == "deadline_exceeded"
    assert (
        not started.finished or started.ending is None or started.ending.code != "deadline_exceeded"
    )
    await reg.close()


async def test_route_hands_messages_over_in_order_then_stops() -> None:
    session = Session("r", "runsse")
    session.append(0, *wire(run_request()))
    session.append(2, *wire(cancel()))  # held until 1 arrives
    seen: list[str] = []

    def handler(item: object) -> None:
        seen.append(f"{item.input_id} {item.message.WhichOneof('message')}")  # type: ignore[attr-defined]

    session.route(handler)  # what was queued goes first
    assert seen == ["r:0 run_request"]
    session.append(1, *wire(heartbeat()))  # fills the gap: 1 then the held 2, in order
    assert seen == ["r:0 run_request", "r:1 client_heartbeat", "r:2 conversation_action"]
    assert session._inbox.empty()
    session.route(None)
    session.append(3, *wire(heartbeat()))
    assert len(seen) == 3 and kinds(await drain(session)) == ["r:3 client_heartbeat"]


async def test_a_failing_route_handler_never_stops_delivery() -> None:
    session = Session("r", "run")
    calls: list[str] = []

    def handler(item: object) -> None:
        calls.append(item.input_id)  # type: ignore[attr-defined]
        raise RuntimeError("boom")

    session.route(handler)
    session.push(*wire(run_request()))
    session.push(*wire(heartbeat()))
    assert calls == ["r:0", "r:1"] and session.next_seqno == 2


async def test_route_keeps_the_end_of_input_for_receive() -> None:
    session = Session("r", "run")
    session.push(*wire(run_request()))
    session.close_input()
    seen: list[object] = []
    session.route(seen.append)
    assert len(seen) == 1
    assert await session.receive() is None and await session.receive() is None
