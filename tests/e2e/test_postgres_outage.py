"""PostgreSQL restarts under two replicas (issue 27, point 3): the pooled connections a restart
leaves stale are replaced, not failed; what a client sent and got acknowledged reaches the run
once the database is back, before the run's start timeout; a storage failure the client sees
is `unavailable`; nothing is lost and nothing runs twice. A cluster of its own (it is stopped
and started), real server processes, the shim's split turns (RunSSE on A, appends to B).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cursor_byok.llm.types import UserMessage
from cursor_byok.store.errors import StoreUnreachableError
from cursor_byok.store.postgres import PostgresStore
from cursor_byok.transport.runtime.ending import storage_ending
from tests.e2e.test_shim import (
    ShimRun,
    chat_requests,
    exec_of,
    http,
    read_ok,
    run_request,
    unique,
)
from tests.e2e.test_two_processes import history
from tests.support import connect_client as cc
from tests.support.live import brain_config, server_process
from tests.support.postgres import Cluster, cluster
from tests.support.upstream import FakeUpstream


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[Cluster]:
    with cluster() as c:
        yield c


def restart(c: Cluster, down_s: float) -> float:
    """Stop the server (its connections closed), wait, start it; returns when it is back."""
    c.stop_server()
    time.sleep(down_s)
    c.start_server()
    return time.monotonic()


async def append_until_stored(
    client: httpx.AsyncClient, request_id: str, seqno: int, message: object, timeout: float = 30
) -> int:
    """Send one append as a client does: again while it is refused `unavailable` (503).
    Returns how many times it was refused."""
    refused = 0
    deadline = time.monotonic() + timeout
    while True:
        r = await cc.append(client, request_id, seqno, message)  # type: ignore[arg-type]
        if r.status_code == 200:
            return refused
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "unavailable"
        assert "send it again" in r.json()["message"] or "try again" in r.json()["message"]
        refused += 1
        assert time.monotonic() < deadline, "never stored"
        await asyncio.sleep(0.2)


async def test_pooled_connections_a_restart_left_are_replaced_and_an_outage_is_unavailable(
    own_cluster: Cluster,
) -> None:
    db = own_cluster.create_database(f"pool_{uuid.uuid4().hex[:8]}")
    store = await PostgresStore.open(db, connections=4)
    try:
        await asyncio.gather(*(store.list_conversations(1) for _ in range(8)))  # all 4 open
        await asyncio.to_thread(restart, own_cluster, 0.2)
        done = await asyncio.gather(
            *(store.list_conversations(1) for _ in range(8)),
            store.publish_append("r", 0, b"x"),
            return_exceptions=True,
        )
        assert not [d for d in done if isinstance(d, BaseException)], done
        await asyncio.to_thread(own_cluster.stop_server)
        try:
            with pytest.raises(StoreUnreachableError) as down:
                await store.list_conversations(1)
        finally:
            await asyncio.to_thread(own_cluster.start_server)
        ending = storage_ending(down.value)
        assert ending.code == "unavailable", ending
        assert ending.message == (
            "the server cannot reach its storage right now; try again in a moment"
        )
        assert await store.fetch_appends("r", 0) == ((0, b"x", None),)
    finally:
        await store.close()


async def test_a_restart_mid_turn_and_a_split_turn_right_after_it(
    upstream: FakeUpstream, tmp_path: Path, own_cluster: Cluster
) -> None:
    """A turn streams on A while the database restarts: it ends once, committed. A split
    turn started 0.5 s after the database is back: its append is stored at once, and A
    delivers it (before: 503s from stale pooled connections, then "no run request arrived"
    after 10 s when the announcement of the append was missed and nothing looked again)."""
    db = own_cluster.create_database(f"midturn_{uuid.uuid4().hex[:8]}")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    slow, after = unique("[slow 6] through a restart"), unique("right after the restart")
    first_conv, second_conv = str(uuid.uuid4()), str(uuid.uuid4())
    config = brain_config(upstream.base_url, db=db)
    with server_process(config, tmp_path / "a") as a, server_process(config, tmp_path / "b") as b:
        async with http(a) as client_a, http(b) as client_b:
            first = ShimRun(client_a)
            async with first.subscribe() as reader:
                await append_until_stored(
                    client_b, first.request_id, 0, run_request(slow, first_conv)
                )
                await asyncio.sleep(0.5)  # the model call is under way
                back = await asyncio.to_thread(restart, own_cluster, 1.0)
                await asyncio.sleep(max(0.0, back + 0.5 - time.monotonic()))
                second = ShimRun(client_a)
                async with second.subscribe() as reader2:
                    started = time.monotonic()
                    refused = await append_until_stored(
                        client_b, second.request_id, 0, run_request(after, second_conv)
                    )
                    end2 = await reader2.wait_end(30)
                    took = time.monotonic() - started
                end = await reader.wait_end(30)
        logs = a.log() + b.log()
    # The database was back: B's pooled connections the restart left are replaced, not used
    # to fail the append (before: 503s for seconds after the restart, one per stale one).
    assert refused == 0, logs
    assert end2 == {} and reader2.turn_ended, (end2, logs)
    assert "".join(reader2.texts) == f"You said: {after}"
    assert took < 8, (took, logs)  # well before the 10 s start timeout
    assert end == {} and reader.turn_ended, (end, logs)
    assert "".join(reader.texts) == f"You said: {slow}"
    for conversation, text in ((first_conv, slow), (second_conv, after)):
        messages = history(db, conversation)
        assert [type(m).__name__ for m in messages] == ["UserMessage", "AssistantMessage"]
        assert isinstance(messages[0], UserMessage)
        assert len(chat_requests(upstream, text)) == 1  # each answered once


async def test_a_restart_mid_tool_the_result_sent_meanwhile_reaches_the_run_once(
    upstream: FakeUpstream, tmp_path: Path, own_cluster: Cluster
) -> None:
    """The run on A waits for a tool result; the database goes down; the client sends the
    result to B, refused `unavailable` until the database is back, then stored: A gets it
    and the turn ends with one tool result and one model call after it."""
    db = own_cluster.create_database(f"midtool_{uuid.uuid4().hex[:8]}")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    conversation = str(uuid.uuid4())
    prompt = unique('[tool Read {"path": "/home/tester/project-e2e/outage.md"}]')
    config = brain_config(upstream.base_url, db=db)
    with server_process(config, tmp_path / "a") as a, server_process(config, tmp_path / "b") as b:
        async with http(a) as client_a, http(b) as client_b:
            run = ShimRun(client_a)
            async with run.subscribe() as reader:
                await append_until_stored(
                    client_b, run.request_id, 0, run_request(prompt, conversation)
                )
                ask = await reader.wait_for(exec_of("read_args"), 20)
                esm = ask.exec_server_message
                result = read_ok(esm.id, esm.read_args.path, "outage line one\n")
                # The client's answers to what came with the tool call (the checkpoint's blob)
                # are stored first: only the tool's result is sent during the outage.
                await asyncio.gather(*reader._tasks)
                await asyncio.to_thread(own_cluster.stop_server)
                sending = asyncio.create_task(
                    append_until_stored(client_b, run.request_id, 1, result)
                )
                await asyncio.sleep(1.5)
                await asyncio.to_thread(own_cluster.start_server)
                refused = await sending
                end = await reader.wait_end(30)
        logs = a.log() + b.log()
    assert refused >= 1, logs  # sent during the outage: refused, not acknowledged and lost
    assert end == {} and reader.turn_ended, (end, logs)
    assert "outage line one" in "".join(reader.texts)
    asks = [m for _, m in reader.events if exec_of("read_args")(m)]
    assert len(asks) == 1  # the tool was asked for once
    _first, second = chat_requests(upstream, prompt)  # two model calls, not three
    tools = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tools) == 1 and "outage line one" in tools[0]["content"]
    messages = history(db, conversation)
    assert sum(isinstance(m, UserMessage) for m in messages) == 1
