"""kill -9 of the REAL server while a helper (Task child) streams (docs/subagents.md,
"Durability"): after the restart the IDE reconnects both runs (the shim's RunSSE under their
request ids, as the reference describes reconnection); the child's model call is sent again
and its turn ends; the parent's Task result, whose answer from the IDE was lost with the
parent's stream, is built from the child conversation linked to the call. Exactly one child
result reaches the parent, no second child is asked for, and no message is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import uuid
from pathlib import Path

from cursor_byok.store.api import LLMCallRecord
from cursor_byok.store.sql.rows import CALL_FIELDS
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.runtime import records
from tests.e2e.test_crash_recovery import Crashable, partial_then_hang
from tests.e2e.test_queries import cards, tool_prompt
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    chat_requests,
    content_text,
    exec_of,
    http,
    run_request,
)
from tests.support import brain
from tests.support.live import ServerProcess
from tests.support.upstream import FakeUpstream, Received, Reply


def hang_for(marker: str) -> object:
    """The next model call hangs half-way when it is the helper's, else the brain answers."""

    def reply(received: Received) -> Reply:
        if marker in received.body.decode(errors="replace"):
            return partial_then_hang("Looking around the parser ")
        return brain.answer(received)

    return reply


def links(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT parent_conversation_id, parent_tool_call_id, child_conversation_id "
            "FROM subagent_links"
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


async def reconnect(server: ServerProcess, request_id: str, seq: int) -> Reader:
    """Reopen RunSSE under `request_id` and read the run to its end."""
    async with http(server) as client:
        run = ShimRun(client)
        run.request_id = request_id
        run.seq = seq
        async with run.subscribe() as reader:
            await reader.wait_end(60)
            return reader


async def test_kill9_while_the_child_streams_gives_the_parent_one_result(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    crashable = Crashable(upstream, tmp_path)
    try:
        await crash_and_come_back(crashable, upstream)
    finally:
        crashable.close()


async def crash_and_come_back(crashable: Crashable, upstream: FakeUpstream) -> None:
    marker = f"#{uuid.uuid4().hex[:8]}"
    child_prompt = f"[helper Scanning] look at the parser {marker}"
    prompt = tool_prompt("Task", {"description": "Scan", "prompt": child_prompt})
    parent_id, child_id = str(uuid.uuid4()), str(uuid.uuid4())
    server = crashable.start()
    async with http(server) as client:
        parent = ShimRun(client)
        async with parent.subscribe() as preader:
            await parent.send(run_request(prompt, parent_id))
            sent = await preader.wait_for(exec_of("subagent_args"))
            args = sent.exec_server_message.subagent_args
            upstream.push(hang_for(marker))  # type: ignore[arg-type]
            child = ShimRun(client)
            headers = {
                "x-parent-request-id": parent.request_id,
                "x-parent-agent-tool-call-id": args.tool_call_id,
            }
            async with child.subscribe() as creader:
                message = run_request(args.prompt, child_id, model=args.model_id)
                message.run_request.subagent_type_name = args.subagent_type
                await child.append(message, headers=headers)
                await creader.wait_for(lambda m: m.interaction_update.HasField("text_delta"))
                for _ in range(100):  # the link is written before the child's first commit
                    if links(crashable.db):
                        break
                    await asyncio.sleep(0.05)
                assert links(crashable.db) == [(parent_id, args.tool_call_id, child_id)]
                crashable.kill9()
                with contextlib.suppress(AssertionError):  # the stream breaks
                    await creader.wait_end(10)
            with contextlib.suppress(AssertionError):
                await preader.wait_end(10)
        assert not preader.turn_ended and not creader.turn_ended

    server = crashable.start()
    preader, creader = await asyncio.gather(
        reconnect(server, parent.request_id, parent.seq),
        reconnect(server, child.request_id, child.seq),
    )
    assert creader.end == {} and creader.turn_ended, crashable.log()
    assert preader.end == {} and preader.turn_ended, crashable.log()
    # The parent turn's totals after the restart: its own second call (60 uncached input
    # tokens, 40 cache reads) and the whole helper (120 + 60, 40), whose calls ran either side,
    # and the attempt of the helper's call the kill cut short: the restarted process found it
    # planned by a dead process and recorded its request's estimated input (issue 23), and the
    # call sent again adds its own counts to that.
    with sqlite3.connect(crashable.db) as conn:
        (row,) = conn.execute(
            f"SELECT {', '.join(CALL_FIELDS)} FROM llm_calls "
            "WHERE conversation_id = ? AND estimated_tokens IS NOT NULL",
            (child_id,),
        ).fetchall()
    cut = LLMCallRecord(**dict(zip(CALL_FIELDS, row, strict=True)))
    estimate = records.estimated_input(cut)
    assert estimate > 0 and cut.status == "committed"
    assert (cut.input_tokens, cut.estimated_tokens) == (120 + estimate, "input,output")
    (ended,) = [
        m.interaction_update.turn_ended
        for m in preader.messages
        if m.interaction_update.HasField("turn_ended")
    ]
    assert (ended.input_tokens, ended.cache_read_tokens) == (240 + estimate, 80), crashable.log()
    # No second child was asked for, and only the one link exists.
    assert not [m for m in preader.messages if exec_of("subagent_args")(m)]
    assert links(crashable.db) == [(parent_id, args.tool_call_id, child_id)]
    # The child's turn ended with its report, once; the half answer was never committed.
    steps = cards(creader, "tool_call_completed")
    assert [c.WhichOneof("tool") for c in steps] == ["communicate_update_tool_call"]
    report = "Helper report: Scanning done, 3 files found."
    # The parent's model read exactly one Task result: the child's report.
    first, second = chat_requests(upstream, prompt)[-2:]
    tools = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tools) == 1
    assert content_text(tools[0]["content"]) == (
        f"{report}\n\n(Helper agent id: {child_id}. Pass it as resume to continue this helper.)"
    )
    assert json.dumps(second["messages"][: len(first["messages"])]) == json.dumps(first["messages"])
    with sqlite3.connect(crashable.db) as conn:
        (parent_messages,) = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (parent_id,)
        ).fetchone()
    # user, assistant (Task call), the Task result, the final answer.
    assert parent_messages == 4
    assert isinstance(a.SubagentResult(), a.SubagentResult)
