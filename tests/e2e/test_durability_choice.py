"""The runner's fsync choice: the commit before a model call is not fsynced (unless
`server.fsync_model_calls`), every other commit is (docs/store.md, "Durability")."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.app import App
from cursor_byok.config import parse_config
from cursor_byok.launch import running_server
from cursor_byok.transport.cursor.proto import agent_pb2
from tests.support import connect_client as cc
from tests.support.live import ThreadedUpstream, brain_config
from tests.support.upstream import FakeUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with ThreadedUpstream() as up:
        yield up


def brain_request(text: str, conversation_id: str) -> agent_pb2.AgentClientMessage:
    """A run request for the scripted brain, with inline context (no context exec needed)."""
    request = cc.run_request(text)
    request.run_request.requested_model.model_id = "brain-1"
    request.run_request.conversation_id = conversation_id
    context = request.run_request.action.user_message_action.request_context
    context.env.workspace_paths.append(f"/tmp/{conversation_id}")
    return request


async def one_turn(port: int, text: str) -> cc.StreamResult:
    client = await cc.H2Client.connect("127.0.0.1", port)
    try:
        stream = await client.open_run()
        request = brain_request(text, "durability")
        await stream.send(request)
        while (frame := await stream.next_frame(10)) is not None and not frame.flags & 0x02:
            msg = stream.result.messages[-1]
            if msg.HasField("kv_server_message"):  # keep the checkpoint blob, as clients do
                reply = agent_pb2.AgentClientMessage()
                reply.kv_client_message.id = msg.kv_server_message.id
                reply.kv_client_message.set_blob_result.SetInParent()
                await stream.send(reply)
        return stream.result
    finally:
        await client.close()


async def durable_flags(upstream: FakeUpstream, tmp_path: Path, extra: str) -> list[bool]:
    config = parse_config(brain_config(upstream.base_url, db=tmp_path / "db", extra=extra))
    app = await App.open(config)
    seen: list[bool] = []
    commit = app.store.commit_input

    async def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["durable"])
        return await commit(*args, **kwargs)

    app.store.commit_input = recording  # type: ignore[method-assign]
    try:
        async with running_server(config, app.runner.handle) as srv:
            result = await one_turn(srv.port, "hello durability")
        assert result.end == {} and "".join(result.texts) == "You said: hello durability"
    finally:
        await app.close()
    return seen


async def test_the_commit_before_a_model_call_skips_the_fsync(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    # Start (then the model call), then the answer (then the end of the turn)
    assert await durable_flags(upstream, tmp_path, "") == [False, True]
    # the input commit names the model call; the request bytes live only in its call record
    conn = sqlite3.connect(tmp_path / "db")
    try:
        results = [json.loads(r[0]) for r in conn.execute("SELECT result FROM input_commits")]
        calls = dict(conn.execute("SELECT call_id, messages_hash FROM llm_calls").fetchall())
    finally:
        conn.close()
    started = [r for r in results if r.get("command") == "call_llm"]
    assert len(started) == 1 and set(started[0]) == {"command", "call_id", "messages_hash"}
    assert calls == {started[0]["call_id"]: started[0]["messages_hash"]}


async def test_fsync_model_calls_makes_every_commit_durable(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    flags = await durable_flags(upstream, tmp_path, "fsync_model_calls = true")
    assert flags == [True, True]


async def test_the_checkpoint_blob_travels_while_the_last_commit_is_written(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    """set_blob goes out before the turn's last commit returns; turn_ended and then the
    checkpoint only after it (the client's round trip and the fsync overlap; the order is the
    protocol's: turn_ended, final checkpoint, end of stream)."""
    config = parse_config(brain_config(upstream.base_url, db=tmp_path / "db"))
    app = await App.open(config)
    commit = app.store.commit_input
    times: dict[str, float] = {}

    async def slow_last_commit(*args: Any, **kwargs: Any) -> Any:
        if kwargs["durable"]:  # the commit that ends the turn
            await asyncio.sleep(0.3)
            result = await commit(*args, **kwargs)
            times["committed"] = time.monotonic()
            return result
        return await commit(*args, **kwargs)

    app.store.commit_input = slow_last_commit  # type: ignore[method-assign]
    client = None
    try:
        async with running_server(config, app.runner.handle) as srv:
            client = await cc.H2Client.connect("127.0.0.1", srv.port)
            stream = await client.open_run()
            request = brain_request("overlap please", "overlap")
            await stream.send(request)
            while (frame := await stream.next_frame(10)) is not None and not frame.flags & 0x02:
                msg = stream.result.messages[-1]
                if msg.HasField("kv_server_message"):
                    times["set_blob"] = time.monotonic()
                    reply = agent_pb2.AgentClientMessage()
                    reply.kv_client_message.id = msg.kv_server_message.id
                    reply.kv_client_message.set_blob_result.SetInParent()
                    await stream.send(reply)
                elif msg.HasField("conversation_checkpoint_update"):
                    times["checkpoint"] = time.monotonic()
                elif msg.interaction_update.HasField("turn_ended"):
                    times["turn_ended"] = time.monotonic()
            assert stream.result.end == {}
            await client.close()  # before the server stops, which waits for open connections
            client = None
    finally:
        if client is not None:
            await client.close()
        await app.close()
    assert times["set_blob"] < times["committed"] - 0.1  # sent while the commit was pending
    assert times["committed"] <= times["turn_ended"] <= times["checkpoint"]


async def test_only_a_reopenable_run_keeps_its_run_request(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    """An HTTP/2 Run is never reopened by request_id, so its run request is not stored."""
    await durable_flags(upstream, tmp_path, "")  # one HTTP/2 turn
    conn = sqlite3.connect(tmp_path / "db")
    try:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM conversations").fetchone()[0] == 1
    finally:
        conn.close()
