"""Design §17.4 (stream integration) through the REAL server process: deltas reach the client
in order, the AssistantMessage is committed only after `done`, and the next model call starts
only after every tool result is in."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

from cursor_byok.llm import canonical
from cursor_byok.llm.types import AssistantMessage, ToolResultMessage, UserMessage
from tests.e2e.test_shim import (
    ShimRun,
    chat_requests,
    exec_of,
    http,
    is_text,
    read_ok,
    run_request,
    unique,
    wait_until,
)
from tests.support.brain import CHUNK
from tests.support.live import ServerProcess
from tests.support.upstream import FakeUpstream


def database(server: ServerProcess) -> Path:
    # tests/e2e/conftest.py puts byok.db beside the server's log
    return server.log_path.parent / "byok.db"


def stored_messages(db: Path, conversation_id: str) -> list[object]:
    """The committed messages of a conversation, read through a read-only connection."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute(
            "SELECT body FROM messages WHERE conversation_id = ? ORDER BY seq", (conversation_id,)
        ).fetchall()
    finally:
        conn.close()
    return [canonical.decode_message(bytes(r[0])) for r in rows]


async def test_every_delta_in_order(server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique("count the deltas " + " ".join(f"w{i}" for i in range(40)))
    expected = f"You said: {prompt}"
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            assert await reader.wait_end() == {}
    # the brain sends CHUNK characters per delta; each one arrives, in order, unmerged
    chunks = [expected[i : i + CHUNK] for i in range(0, len(expected), CHUNK)]
    assert reader.texts == chunks
    assert "".join(reader.texts) == expected
    kinds = reader.kinds
    last_text = max(i for i, m in enumerate(reader.messages) if is_text(m))
    assert kinds.index("interaction_update.turn_ended") > last_text


async def test_assistant_message_committed_only_after_done(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    db = database(server)
    assert db.is_file()
    conversation = f"conv-{unique('x').split('#')[1]}"
    prompt = unique("[slow 3] commit later")
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, conversation))
            await reader.wait_for(is_text)
            during = stored_messages(db, conversation)
            texts_then = len(reader.texts)
            assert reader.end is None  # still streaming while we looked
            end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    assert texts_then < len(reader.texts)
    assert [type(m) for m in during] == [UserMessage]
    after = stored_messages(db, conversation)
    assert [type(m) for m in after] == [UserMessage, AssistantMessage]
    final = after[1]
    assert isinstance(final, AssistantMessage) and final.text == f"You said: {prompt}"


async def test_next_model_call_only_after_all_tool_results(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    db = database(server)
    conversation = f"conv-{unique('y').split('#')[1]}"
    prompt = unique('[tools Read {"path": "/w/a.txt"} Read {"path": "/w/b.txt"}]')
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, conversation))
            first = await reader.wait_for(exec_of("read_args"))
            assert first.exec_server_message.read_args.path == "/w/a.txt"
            assert len(chat_requests(upstream, prompt)) == 1
            await run.append(read_ok(first.exec_server_message.id, "/w/a.txt", "AAA first\n"))
            second = await reader.wait_for(
                lambda m: (
                    exec_of("read_args")(m) and m.exec_server_message.read_args.path == "/w/b.txt"
                )
            )
            await asyncio.sleep(0.5)
            assert len(chat_requests(upstream, prompt)) == 1, "a model call before all results"
            # the first result is stored, the model still waits
            stored = stored_messages(db, conversation)
            assert [type(m) for m in stored][-1] is ToolResultMessage
            t_answer = time.monotonic()
            await run.append(read_ok(second.exec_server_message.id, "/w/b.txt", "BBB second\n"))
            assert await wait_until(lambda: len(chat_requests(upstream, prompt)) == 2, 5)
            t_call = time.monotonic()
            end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    assert t_call >= t_answer
    body = chat_requests(upstream, prompt)[1]
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    assert [t["tool_call_id"] for t in tools] == ["call_p1", "call_p2"]
    assert "AAA first" in tools[0]["content"] and "BBB second" in tools[1]["content"]
    calls = [m for m in body["messages"] if m["role"] == "assistant"][-1]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_p1", "call_p2"]
    assert [json.loads(c["function"]["arguments"])["path"] for c in calls] == [
        "/w/a.txt",
        "/w/b.txt",
    ]
    assert "Both tools answered: " in "".join(reader.texts)
    after = stored_messages(db, conversation)
    assert [type(m).__name__ for m in after] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]


async def test_upstream_connection_is_reused(server: ServerProcess, upstream: FakeUpstream) -> None:
    """Sequential turns reuse the server's keep-alive connection to the provider."""
    async with http(server) as client:
        prompt = unique("warm the pool")
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            assert await reader.wait_end() == {}
        before = upstream.connections
        for i in range(3):
            run = ShimRun(client)
            async with run.subscribe() as reader:
                await run.append(run_request(unique(f"reuse {i}")))
                assert await reader.wait_end() == {}
    assert upstream.connections - before <= 1, upstream.connections - before
