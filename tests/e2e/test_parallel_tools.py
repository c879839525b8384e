"""Parallel tool calls against the REAL server process, over HTTP/2 `Run` and the HTTP/1.1 shim:
every call of one response is sent to the client at once, the answers are taken in any order,
each committed once and fed to the model in call order; a cancel mid-batch keeps the answers
received (a kill -9 mid-batch: test_parallel_tools_crash.py)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_modes_actions import TRANSPORTS, open_run
from tests.e2e.test_queries import query_of, respond
from tests.e2e.test_shim import (
    Reader,
    cancel,
    chat_requests,
    exec_of,
    exec_reply,
    read_ok,
    run_request,
)
from tests.e2e.test_subagents import (  # noqa: F401 (sserver: the fixture)
    parent_request,
    request_id_of,
    serve_child,
    sserver,
)
from tests.support.live import ServerProcess
from tests.support.upstream import FakeUpstream

TOOL_S = 1.0  # how long each of the client's tools takes


def read_execs(reader: Reader) -> list[agent_pb2.ExecServerMessage]:
    return [
        m.exec_server_message
        for m in reader.messages
        if m.HasField("exec_server_message") and m.exec_server_message.HasField("read_args")
    ]


async def all_sent(reader: Reader, count: int, within: float) -> list[agent_pb2.ExecServerMessage]:
    """The `count` read execs of the response, all of them there within `within` seconds of
    the first, before any answer went back."""
    await reader.wait_for(lambda m: bool(read_execs(reader)))
    deadline = time.monotonic() + within
    while len(read_execs(reader)) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    execs = read_execs(reader)
    assert len(execs) == count, f"{len(execs)} of {count} execs sent before any answer"
    return execs


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_four_calls_run_together_and_reach_the_model_in_call_order(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    conversation = str(uuid.uuid4())
    prompt = f'[parallel 4 Read {{"path": "/w/a.txt"}}] {conversation}'
    async with open_run(server, transport) as (send, reader):
        await send(run_request(prompt, conversation))
        execs = await all_sent(reader, 4, within=0.5)
        began = time.monotonic()
        assert [e.read_args.tool_call_id for e in execs] == [f"call_q{i}" for i in range(1, 5)]

        async def answer(e: agent_pb2.ExecServerMessage, after: float) -> None:
            await asyncio.sleep(after)  # the tool runs on the client for TOOL_S
            await send(read_ok(e.id, e.read_args.path, f"text of {e.read_args.tool_call_id}\n"))

        # The client's tools run concurrently and finish in reverse order.
        await asyncio.gather(*(answer(e, TOOL_S + 0.05 * (3 - k)) for k, e in enumerate(execs)))
        assert await reader.wait_end() == {}, reader.kinds
        took = time.monotonic() - began
    # About one tool's time, not four.
    assert took < 2 * TOOL_S, took
    first, second = chat_requests(upstream, prompt)
    tools = [m for m in second["messages"] if m["role"] == "tool"]
    # In the call order, whatever the order of the answers; each once.
    assert [m["tool_call_id"] for m in tools] == [f"call_q{i}" for i in range(1, 5)]
    assert ["text of call_q" in json.dumps(m["content"]) for m in tools] == [True] * 4
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert "".join(reader.texts).startswith(
        "All 4 answered, in order call_q1 call_q2 call_q3 call_q4"
    )
    # Each card completed once.
    completed = [k for k in reader.kinds if k == "interaction_update.tool_call_completed"]
    assert len(completed) == 4


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_cancel_mid_batch_keeps_the_answers_received(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    conversation = str(uuid.uuid4())
    prompt = f'[parallel 3 Read {{"path": "/w/b.txt"}}] {conversation}'
    async with open_run(server, transport) as (send, reader):
        await send(run_request(prompt, conversation))
        q1, _, q3 = await all_sent(reader, 3, within=0.5)
        for e in (q3, q1):  # two of the three answer, the later one first
            await send(read_ok(e.id, e.read_args.path, f"kept {e.read_args.tool_call_id}\n"))
        await reader.wait_for(
            lambda m: (
                sum(1 for k in reader.kinds if k == "interaction_update.tool_call_completed") >= 2
            )
        )
        await send(cancel())
        end = await reader.wait_end()
    assert end.get("error", {}).get("code") == "canceled", end
    # The next turn's model reads both answers and the canceled one, in call order.
    later = f"what came back? {conversation}"
    async with open_run(server, transport) as (send, reader):
        await send(run_request(later, conversation))
        assert await reader.wait_end() == {}
    (body,) = chat_requests(upstream, later)
    tools = {
        m["tool_call_id"]: json.dumps(m["content"]) for m in body["messages"] if m["role"] == "tool"
    }
    assert list(tools) == ["call_q1", "call_q2", "call_q3"]
    assert "kept call_q1" in tools["call_q1"] and "kept call_q3" in tools["call_q3"]
    assert "cancel" in tools["call_q2"].lower()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_query_goes_out_with_the_other_calls_and_answers_in_any_order(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """SwitchMode (an interaction query the user answers) and Read in one response: both are
    sent at once; the Read answers first, the approval later; the model reads both, in call
    order, and its next call has the approved mode's tools."""
    conversation = str(uuid.uuid4())
    args = {"target_mode_id": "plan", "explanation": "A larger change."}
    prompt = (
        f"[tools SwitchMode {json.dumps(args)} Read {json.dumps({'path': '/w/c.txt'})}] "
        f"{conversation}"
    )
    async with open_run(server, transport) as (send, reader):
        await send(run_request(prompt, conversation))
        asked = await reader.wait_for(query_of("switch_mode_request_query"))
        (read,) = await all_sent(reader, 1, within=0.5)  # sent without waiting for the user
        await send(read_ok(read.id, read.read_args.path, "the c file\n"))
        await reader.wait_for(
            lambda m: (
                m.HasField("interaction_update")
                and m.interaction_update.HasField("tool_call_completed")
                and m.interaction_update.tool_call_completed.tool_call.HasField("read_tool_call")
            )
        )
        approved = agent_pb2.SwitchModeRequestResponse(
            approved=agent_pb2.SwitchModeRequestResponse.Approved()
        )
        await send(respond(asked.interaction_query.id, switch_mode_request_response=approved))
        assert await reader.wait_end() == {}, reader.kinds
    _, second = chat_requests(upstream, prompt)
    tools = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call_p1", "call_p2"]
    assert "approved" in json.dumps(tools[0]["content"]) and "the c file" in json.dumps(
        tools[1]["content"]
    )
    names = [t["function"]["name"] for t in second["tools"]]
    assert "Write" not in names and "CreatePlan" in names  # plan mode's tools from this call


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_two_task_children_run_at_once(
    sserver: ServerProcess,  # noqa: F811
    upstream: FakeUpstream,
    transport: str,
) -> None:
    """Two Task calls in one response: both helpers' execs go out together, the IDE runs both
    children at the same time, and the parent's model reads each report at its own call."""
    tag = uuid.uuid4().hex[:8]
    first, second = (
        {
            "description": f"Scan {n}",
            "prompt": f"[helper {n}] scan {n} #{tag}",
            "subagent_type": "explore",
        }
        for n in ("one", "two")
    )
    prompt = f"[tools Task {json.dumps(first)} Task {json.dumps(second)}] {tag}"
    request = parent_request(prompt)
    async with open_run(sserver, transport) as (send, reader):
        await send(request)
        await reader.wait_for(exec_of("subagent_args"))
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            execs = [m.exec_server_message for m in reader.messages if exec_of("subagent_args")(m)]
            if len(execs) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(execs) == 2, "both helpers go out before either reports"
        children = await asyncio.gather(
            *(serve_child(sserver, transport, e.subagent_args, request_id_of(send)) for e in execs)
        )
        for e, (child_id, child) in reversed(list(zip(execs, children, strict=True))):
            final = "".join(child.texts)
            success = agent_pb2.SubagentSuccess(agent_id=child_id, final_message=final)
            await send(exec_reply(e.id, subagent_result=agent_pb2.SubagentResult(success=success)))
        assert await reader.wait_end(30) == {}, reader.kinds
    _, after = chat_requests(upstream, prompt)
    tools = [m for m in after["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call_p1", "call_p2"]
    assert "one done" in json.dumps(tools[0]["content"])
    assert "two done" in json.dumps(tools[1]["content"])
