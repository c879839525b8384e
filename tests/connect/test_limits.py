"""What the transport holds for runs is bounded (issue 13, points 1 and 2).

Point 1: out-of-order appends and a run's replayable output are bounded in bytes, per run and per
server; past a bound the client gets `resource_exhausted` and nothing already accepted is lost.
Point 2: a flood of cheap appends for new request ids cannot take legitimate runs down: runs
that never start expire in seconds, each client may have only so many of them, and the table
counts bytes. Over real HTTP on loopback where a server is involved; the clock-driven cases use
the registry with an injected clock.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from cursor_byok.launch import RunningServer, connect_app, running_server, transport_limits
from cursor_byok.transport.connect.channel import RunChannel
from cursor_byok.transport.connect.envelopes import ConnectError
from cursor_byok.transport.connect.ledger import RUN_COST, client_key
from cursor_byok.transport.connect.session_registry import SessionRegistry
from cursor_byok.transport.connect.sessions import RunHandler, RunStartInfo, TransportLimits
from tests.connect.test_app import make_config
from tests.connect.test_sessions import Clock, wire
from tests.support import connect_client as cc

KIB = 1024


def rid() -> str:
    return str(uuid.uuid4())


def fast(**limits: Any) -> TransportLimits:
    return TransportLimits(heartbeat_interval=0.2, reap_interval=0.05, **limits)


@asynccontextmanager
async def serving(handler: RunHandler, limits: TransportLimits) -> AsyncIterator[RunningServer]:
    async with running_server(make_config(), handler, limits=limits) as srv:
        yield srv


@asynccontextmanager
async def client_from(
    base_url: str, address: str = "127.0.0.1"
) -> AsyncIterator[httpx.AsyncClient]:
    """A client whose connections leave from `address` (any 127/8 address reaches loopback)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(base_url=base_url, timeout=10, transport=transport) as client:
        yield client


def padded(kib: int) -> bytes:
    """A client message of about `kib` KiB (a run_request with that much text)."""
    return cc.run_request("x" * (kib * KIB)).SerializeToString()


async def legit_turn(client: httpx.AsyncClient) -> cc.StreamResult:
    """A whole shim turn with `cc.echo_handler`: RunSSE, then the run request."""
    r = rid()
    async with cc.runsse(client, r) as stream:
        resp = await cc.append(client, r, 0, cc.run_request("legit"), binary=True)
        assert resp.status_code == 200, resp.text
        return await stream.read_all()


# -- point 1: held appends and output, in bytes -----------------------------------------------


async def test_held_appends_past_the_run_byte_bound_are_refused_and_none_accepted_is_lost() -> None:
    big = padded(64)
    limits = fast(max_held_bytes=4 * len(big))
    async with serving(cc.ordered_echo_handler, limits) as srv, client_from(srv.base_url) as client:
        r = rid()
        for n in range(1, 5):  # four held appends fill the run's bound exactly
            assert (await cc.append(client, r, n, big, binary=True)).status_code == 200
        refused = await cc.append(client, r, 5, big, binary=True)
        assert refused.status_code == 429, refused.text
        body = refused.json()
        assert body["code"] == "resource_exhausted"
        assert "out-of-order appends held for this run would exceed 256 KiB" in body["message"]
        assert "waiting for append_seqno 0" in body["message"]
        async with cc.runsse(client, r) as stream:
            assert (await cc.append(client, r, 0, cc.run_request())).status_code == 200
            # the gap filled: the bound is free again, and the refused seqno can be sent anew
            assert (await cc.append(client, r, 5, cc.cancel())).status_code == 200
            result = await stream.read_all()
    assert result.texts == [f"{r}:{n} run_request" for n in range(5)] + [
        f"{r}:5 conversation_action"
    ]
    assert result.end == {}


async def test_held_appends_past_the_server_byte_bound_are_refused_until_memory_frees() -> None:
    big = padded(256)
    limits = fast(max_held_bytes=4 * len(big), max_buffered_bytes=1024 * KIB)
    async with serving(cc.ordered_echo_handler, limits) as srv, client_from(srv.base_url) as client:
        a, b = rid(), rid()
        for n in range(1, 4):  # run a holds 768 KiB of the server's 1 MiB
            assert (await cc.append(client, a, n, big, binary=True)).status_code == 200
        refused = await cc.append(client, b, 1, big, binary=True)
        assert refused.status_code == 429, refused.text
        assert refused.json()["code"] == "resource_exhausted"
        assert "the server is holding" in refused.json()["message"]
        assert "limit 1 MiB" in refused.json()["message"]
        async with cc.runsse(client, a) as stream:
            assert (await cc.append(client, a, 0, cc.run_request())).status_code == 200
            assert (await cc.append(client, a, 4, cc.cancel())).status_code == 200
            result = await stream.read_all()
        assert result.texts == [f"{a}:{n} run_request" for n in range(4)] + [
            f"{a}:4 conversation_action"
        ]
        # a's appends were delivered: what they held is free, and b's append fits now
        assert (await cc.append(client, b, 1, big, binary=True)).status_code == 200


async def test_held_appends_keep_only_their_bytes_and_are_parsed_again_when_delivered() -> None:
    got: list[object] = []

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        while (item := await channel.receive()) is not None:
            got.append(item.message)

    reg = SessionRegistry(handler, parse=lambda payload: ("parsed", payload))
    s, _ = reg.get_or_create("r", "runsse")
    s.append(1, b"one", "as the app parsed it")
    assert s.held == 1 and s._held[1] == (b"one", None)  # no parsed copy is kept
    s.append(0, b"zero", "as the app parsed it")
    await asyncio.sleep(0.05)
    assert got == ["as the app parsed it", ("parsed", b"one")]
    await reg.close()


async def flooding_handler(channel: RunChannel, info: RunStartInfo) -> None:
    """Answers the run request with 100 KiB messages until the transport stops it."""
    await channel.receive()
    for _ in range(100):
        channel.send(cc.text_delta("y" * (100 * KIB)).SerializeToString())
        await asyncio.sleep(0)
    channel.finish()


async def test_a_run_whose_output_passes_its_bound_ends_resource_exhausted() -> None:
    limits = fast(max_output_bytes=512 * KIB)
    async with serving(flooding_handler, limits) as srv, client_from(srv.base_url) as client:
        r = rid()
        async with cc.runsse(client, r) as stream:
            assert (await cc.append(client, r, 0, cc.run_request())).status_code == 200
            result = await stream.read_all()
    assert len(result.texts) == 5  # what was sent before the bound still reaches the client
    assert result.error is not None and result.error["code"] == "resource_exhausted"
    assert "the run's output exceeds 512 KiB" in result.error["message"]


# -- point 2: a flood of runs that never start ----------------------------------------------


async def test_a_flood_of_new_runs_cannot_refuse_a_legitimate_run() -> None:
    # Scaled down: a table of 40 runs, 8 unstarted runs per client, expiring after 1.5 s.
    limits = fast(max_sessions=40, max_unstarted_per_client=8, unstarted_timeout=1.5)
    async with (
        serving(cc.echo_handler, limits) as srv,
        client_from(srv.base_url, "127.0.0.1") as flooder,
        client_from(srv.base_url, "127.0.0.2") as other,
    ):
        assert srv.app is not None
        ledger = srv.app.registry.ledger
        # Appends whose append_seqno 0 never comes: runs that never start.
        waiting = [await cc.append(flooder, rid(), 1, cc.heartbeat()) for _ in range(60)]
        statuses = [w.status_code for w in waiting]
        assert statuses[:9] == [200] * 8 + [429], statuses  # (later ones may follow expiries)
        assert "this client already has 8 runs waiting" in waiting[8].json()["message"]
        # Appends of a first message the handler refuses: runs that end at once.
        refused = [await cc.append(flooder, rid(), 0, cc.heartbeat()) for _ in range(60)]
        assert [r.status_code for r in refused] == [200] * 60
        assert len(srv.app.registry) <= 40
        # Another client's run goes through during the flood ...
        result = await legit_turn(other)
        assert result.texts == ["echo[runsse]: ", "legit"] and result.end == {}
        # ... and the flooding client's own, once its runs that never started expired.
        deadline = time.monotonic() + 10
        while ledger.unstarted("127.0.0.1") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert ledger.unstarted("127.0.0.1") == 0
        result = await legit_turn(flooder)
        assert result.texts == ["echo[runsse]: ", "legit"] and result.end == {}


async def test_runs_that_never_start_expire_in_seconds_and_free_their_client() -> None:
    clock = Clock()

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        await channel.receive()

    limits = TransportLimits(unstarted_timeout=5, max_unstarted_per_client=2, orphan_timeout=1e6)
    reg = SessionRegistry(handler, limits, clock=clock)
    lone, _ = reg.get_or_create("lone", "runsse", client="10.0.0.1")
    lone.append(3, *wire(cc.heartbeat()))  # held: append_seqno 0 never comes
    watched, _ = reg.get_or_create("watched", "runsse", client="10.0.0.1")
    watched.attach()  # a RunSSE waits for it
    started, _ = reg.get_or_create("started", "runsse", client="10.0.0.2")
    started.append(0, *wire(cc.run_request()))
    assert reg.ledger.unstarted("10.0.0.1") == 2 and reg.ledger.unstarted("10.0.0.2") == 0
    clock.now += 4
    reg.reap()
    assert reg.get("lone") is lone and not watched.finished
    clock.now += 2
    reg.reap()
    assert reg.get("lone") is None  # nobody reads it: forgotten at once
    assert lone.ending is not None and lone.ending.code == "deadline_exceeded"
    assert lone.ending.message == "no run request arrived within 5 s"
    assert watched.ending is not None and watched.ending.code == "deadline_exceeded"
    assert reg.get("watched") is watched  # its RunSSE still gets the ending
    assert not started.finished
    assert reg.ledger.unstarted("10.0.0.1") == 0  # the client may open runs again
    reg.get_or_create("again", "runsse", client="10.0.0.1")
    await reg.close()
    assert reg.ledger.used == 0


async def test_a_resumed_run_counts_as_started() -> None:
    """A run reopened after a restart gets its run request from the store, not the client:
    the handler routes without any append having come, and the run must not expire."""
    clock = Clock()
    routed = asyncio.Event()

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        channel.route(lambda item: None)
        routed.set()
        await asyncio.Event().wait()

    reg = SessionRegistry(handler, TransportLimits(unstarted_timeout=5), clock=clock)
    resumed, _ = reg.get_or_create("resumed", "runsse", client="c")
    resumed.attach()
    await asyncio.wait_for(routed.wait(), 5)
    clock.now += 60
    reg.reap()
    assert not resumed.finished and reg.ledger.unstarted("c") == 0
    await reg.close()


async def test_the_run_table_counts_bytes_and_forgets_finished_runs_first() -> None:
    clock = Clock()

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        if await channel.receive() is not None:
            channel.send(b"z" * 3000)
            channel.finish()

    limits = TransportLimits(max_buffered_bytes=3 * RUN_COST + 4000, orphan_timeout=1e6)
    reg = SessionRegistry(handler, limits, clock=clock)
    done, _ = reg.get_or_create("done", "runsse", client="a")
    done.append(0, *wire(cc.run_request()))
    await asyncio.sleep(0.05)
    assert done.finished and done.cost == RUN_COST + 3005
    for name in ("b", "c"):
        reg.get_or_create(name, "runsse", client=name)
    assert reg.ledger.used == 3 * RUN_COST + 3005
    # A fourth run does not fit beside the finished one: the finished one is forgotten.
    reg.get_or_create("d", "runsse", client="d")
    assert reg.get("done") is None and reg.ledger.used == 3 * RUN_COST
    # A fifth does not fit at all: nothing finished is left to forget.
    with pytest.raises(ConnectError) as refused:
        reg.get_or_create("e", "runsse", client="e")
    assert refused.value.code == "resource_exhausted"
    assert refused.value.message == (
        "the server is holding 48 KiB for runs in progress (limit 52 KiB); "
        "try again when some have finished"
    )
    await reg.close()


async def test_runs_of_one_client_that_never_start_are_bounded_in_bytes() -> None:
    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        await channel.receive()

    limits = TransportLimits(max_unstarted_bytes_per_client=RUN_COST + 10 * KIB)
    reg = SessionRegistry(handler, limits)
    s, _ = reg.get_or_create("r", "runsse", client="a")
    s.append(1, b"\x00" * (8 * KIB), None)
    with pytest.raises(ConnectError) as refused:
        s.append(2, b"\x00" * (4 * KIB), None)
    assert refused.value.code == "resource_exhausted"
    assert "runs of this client that have not started would hold more than 26 KiB" in (
        refused.value.message
    )
    other, _ = reg.get_or_create("o", "runsse", client="b")  # another client is unaffected
    other.append(1, b"\x00" * (8 * KIB), None)
    s.append(0, b"", None)  # r starts: what it holds no longer counts against its client
    reg.get_or_create("r2", "runsse", client="a")
    await reg.close()


def test_client_key() -> None:
    assert client_key("127.0.0.1") == "127.0.0.1"
    assert client_key("::ffff:10.1.2.3") == "10.1.2.3"
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("[2001:db8:1:2:bbbb::9]")
    assert client_key("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert client_key(None) == "" and client_key("") == ""


def test_the_settings_reach_the_transport() -> None:
    extra = (
        "run_held_appends_mib = 8\nrun_output_mib = 16\nruns_memory_mib = 32\n"
        "unstarted_run_timeout_s = 2.5\nunstarted_runs_per_client = 3\n"
        "unstarted_mib_per_client = 4\nreconnect_grace_s = 7.5\n"
    )
    limits = transport_limits(make_config(extra).server)
    assert connect_app(make_config(extra), cc.echo_handler).limits == limits
    mib = 1 << 20
    assert (limits.max_held_bytes, limits.max_output_bytes, limits.max_buffered_bytes) == (
        8 * mib,
        16 * mib,
        32 * mib,
    )
    assert limits.unstarted_timeout == 2.5 and limits.max_unstarted_per_client == 3
    assert limits.max_unstarted_bytes_per_client == 4 * mib
    assert limits.orphan_timeout == 7.5  # the shim's reconnect grace
    assert transport_limits(make_config().server) == TransportLimits()


async def test_a_started_runs_frames_are_counted_and_bounded_too() -> None:
    """A frame of a started run is charged like any (ledger.charge's short way for the frames
    that fit): one that does not fit beside a finished run forgets it, one that does not fit
    at all ends its run."""
    go = asyncio.Event()

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        if await channel.receive() is None:
            return
        if channel.request_id == "done":
            channel.send(b"z" * 3000)
            channel.finish()
            return
        channel.send(b"y" * 1000)
        await go.wait()
        channel.send(b"y" * 3000)
        go.clear()
        await go.wait()
        channel.send(b"y" * (RUN_COST + 3000))
        await asyncio.Event().wait()

    limits = TransportLimits(max_buffered_bytes=2 * RUN_COST + 5000, orphan_timeout=1e6)
    reg = SessionRegistry(handler, limits)
    done, _ = reg.get_or_create("done", "runsse", client="a")
    done.append(0, *wire(cc.run_request()))
    live, _ = reg.get_or_create("live", "runsse", client="b")
    live.append(0, *wire(cc.run_request()))
    await asyncio.sleep(0.05)
    assert done.finished and reg.ledger.used == 2 * RUN_COST + 3005 + 1005
    go.set()
    await asyncio.sleep(0.05)
    assert reg.get("done") is None and not live.finished
    assert reg.ledger.used == live.cost == RUN_COST + 1005 + 3005
    go.set()
    await asyncio.sleep(0.05)
    assert live.finished and live.ending is not None
    assert live.ending.code == "resource_exhausted"
    await reg.close()
