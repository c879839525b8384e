"""The runner's fsync choice: the commit before a model call is not fsynced (unless
`server.fsync_model_calls`), every other commit is (docs/store.md, "Durability")."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.app import App
from cursor_byok.config import parse_config
from cursor_byok.transport.proto import agent_pb2
from cursor_byok.transport.server import running_server
from tests.support import connect_client as cc
from tests.support.live import ThreadedUpstream, brain_config
from tests.support.upstream import FakeUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with ThreadedUpstream() as up:
        yield up


async def one_turn(port: int, text: str) -> cc.StreamResult:
    client = await cc.H2Client.connect("127.0.0.1", port)
    try:
        stream = await client.open_run()
        request = cc.run_request(text)
        request.run_request.requested_model.model_id = "brain-1"
        request.run_request.conversation_id = "durability"
        context = request.run_request.action.user_message_action.request_context
        context.env.workspace_paths.append("/tmp/durability")
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
