"""Tool sets per mode and every ConversationAction, end to end: the real server process, the
scripted brain upstream, our Connect client playing the IDE, over both the HTTP/1.1 shim and
HTTP/2 `Run` (issue 14, points 1 and 8)."""

from __future__ import annotations

import contextlib
import itertools
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.loop.catalogue import CATALOGUE_VERSION, Mode, Switches, offered
from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    chat_requests,
    exec_of,
    http,
    kind,
    read_ok,
    request_context,
    unique,
)
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

Send = Callable[[agent_pb2.AgentClientMessage], Awaitable[None]]
TRANSPORTS = ["shim", "h2"]
DISABLED = "Delete"  # switched off by the second server's configuration

MODES = {
    "agent": agent_pb2.AGENT_MODE_AGENT,
    "ask": agent_pb2.AGENT_MODE_ASK,
    "plan": agent_pb2.AGENT_MODE_PLAN,
    "debug": agent_pb2.AGENT_MODE_DEBUG,
    "multitask": agent_pb2.AGENT_MODE_MULTITASK,
}


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("modes") / "byok.db"


@pytest.fixture(scope="module")
def server(upstream: FakeUpstream, db_path: Path) -> Iterator[ServerProcess]:
    with server_process(brain_config(upstream.base_url, db=db_path), db_path.parent) as srv:
        yield srv


@pytest.fixture(scope="module")
def configured(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A server whose config switches a tool off and marks one model as reading images."""
    work = tmp_path_factory.mktemp("configured")
    text = brain_config(
        upstream.base_url, db=work / "byok.db", extra=f'disabled_tools = ["{DISABLED}"]'
    )
    text += '\n[models."brain-vision"]\nprovider = "brain"\nmodel = "brain-1"\nvision = true\n'
    with server_process(text, work) as srv:
        yield srv


@contextlib.asynccontextmanager
async def open_run(server: ServerProcess, transport: str) -> AsyncIterator[tuple[Send, Reader]]:
    """One run over the shim (BidiAppend + RunSSE) or HTTP/2 Run: (send, reader)."""
    if transport == "shim":
        async with http(server) as client:
            run = ShimRun(client)
            async with run.subscribe() as reader:
                yield run.send, reader
        return
    client = await cc.H2Client.connect("127.0.0.1", server.port)
    try:
        stream = await client.open_run()

        async def send(message: agent_pb2.AgentClientMessage) -> None:
            await stream.send(message)

        reader = Reader(stream, send)
        try:
            yield send, reader
        finally:
            await reader.close()
    finally:
        await client.close()


def mcp_tool(name: str) -> agent_pb2.McpToolDefinition:
    return agent_pb2.McpToolDefinition(
        name=name,
        tool_name=name,
        provider_identifier="docs-server",
        description="Look something up in the team's docs.",
        input_schema_json='{"type": "object", "properties": {"q": {"type": "string"}}}',
    )


def moded_request(
    text: str,
    mode: str,
    conversation_id: str | None = None,
    *,
    mcp: str | None = None,
    state: agent_pb2.ConversationStateStructure | None = None,
) -> agent_pb2.AgentClientMessage:
    req = agent_pb2.AgentRunRequest(conversation_id=conversation_id or str(uuid.uuid4()))
    if state is not None:
        req.conversation_state.CopyFrom(state)
    req.requested_model.model_id = "brain-1"
    uma = req.action.user_message_action
    uma.user_message.text = text
    uma.user_message.message_id = str(uuid.uuid4())
    uma.user_message.mode = MODES[mode]  # type: ignore[assignment]
    uma.request_context.CopyFrom(request_context())
    if mcp is not None:
        req.mcp_tools.mcp_tools.append(mcp_tool(mcp))
    return agent_pb2.AgentClientMessage(run_request=req)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def completed_cards(reader: Reader) -> list[agent_pb2.ToolCall]:
    return [
        m.interaction_update.tool_call_completed.tool_call
        for m in reader.messages
        if kind(m) == "interaction_update.tool_call_completed"
    ]


def execs(reader: Reader) -> list[str]:
    return [k for k in reader.kinds if k.startswith("exec_server_message.")]


# -- point 1: tool sets per mode ------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", list(MODES))
async def test_each_mode_offers_its_documented_tools_in_order(
    server: ServerProcess, upstream: FakeUpstream, mode: str, transport: str
) -> None:
    prompt = unique(f"which tools in {mode}")
    async with open_run(server, transport) as (send, reader):
        await send(moded_request(prompt, mode, mcp="lookup_docs"))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    (body,) = chat_requests(upstream, prompt)
    # The mode's catalogue tools (docs/tools.md; a test there keeps docs and code equal), then
    # the MCP tools: in every mode, ask and plan included.
    assert tool_names(body) == [*offered(Mode(mode)), "lookup_docs"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_ask_mode_refuses_write_and_shell_without_sending_them(
    server: ServerProcess, upstream: FakeUpstream, transport: str, db_path: Path
) -> None:
    """The model calls Write and Shell in ask mode: nothing goes to the client, each call gets
    an error card and an error result the model reads next, and the turn ends normally."""
    prompt = unique(
        '[tools Write {"path": "notes.txt", "contents": "x"} Shell {"command": "touch y"}]'
    )
    async with open_run(server, transport) as (send, reader):
        await send(moded_request(prompt, "ask"))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    assert execs(reader) == []  # neither the write nor the command reached the client
    cards = completed_cards(reader)
    assert [c.WhichOneof("tool") for c in cards] == ["edit_tool_call", "shell_tool_call"]
    write, shell = cards
    assert write.edit_tool_call.args.path == "notes.txt"
    assert "not allowed in ask mode" in write.edit_tool_call.result.error.error
    assert shell.shell_tool_call.args.command == "touch y"
    assert shell.shell_tool_call.result.WhichOneof("result") is not None
    first, second = chat_requests(upstream, prompt)
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in results] == ["call_p1", "call_p2"]
    assert all("is not allowed in ask mode" in r["content"] for r in results)
    assert "Error: Write is not allowed in ask mode" in results[0]["content"]
    assert "Error: Shell is not allowed in ask mode" in results[1]["content"]
    # The second request extends the first byte for byte (same system prompt and tools).
    assert json.dumps(second["messages"][: len(first["messages"])]) == json.dumps(first["messages"])
    assert json.dumps(second["tools"]) == json.dumps(first["tools"])
    assert "Both tools answered: Error: Write is not allowed" in "".join(reader.texts)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_plan_mode_runs_a_read_and_requests_extend_byte_for_byte(
    server: ServerProcess, upstream: FakeUpstream, transport: str, db_path: Path
) -> None:
    """A mode's tool call goes to the client as usual; every request of the conversation (the
    tool's follow-up, the next turn) extends the one before it byte for byte, and each call
    record carries the catalogue version."""
    cid = str(uuid.uuid4())
    prompt = unique('[tool Read {"path": "plan.md"}]')
    async with open_run(server, transport) as (send, reader):
        await send(moded_request(prompt, "plan", cid))
        ask = await reader.wait_for(exec_of("read_args"))
        esm = ask.exec_server_message
        await send(read_ok(esm.id, esm.read_args.path, "step one\n"))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    later = unique("and then?")
    async with open_run(server, transport) as (send, reader2):
        await send(moded_request(later, "plan", cid))
        assert await reader2.wait_end() == {}
    bodies = [*chat_requests(upstream, prompt), *chat_requests(upstream, later)]
    assert len(bodies) == 3
    for before, after in itertools.pairwise(bodies):
        n = len(before["messages"])
        assert json.dumps(after["messages"][:n]) == json.dumps(before["messages"])
        assert json.dumps(after["tools"]) == json.dumps(before["tools"])
    assert tool_names(bodies[0]) == list(offered(Mode.PLAN))
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as conn:
        versions = conn.execute(
            "SELECT catalogue_version FROM llm_calls WHERE conversation_id = ?", (cid,)
        ).fetchall()
    assert versions == [(CATALOGUE_VERSION,)] * 3


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_config_switches_a_tool_off_and_vision_sets_supports_images(
    configured: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique("tools without delete")
    async with open_run(configured, transport) as (send, reader):
        await send(moded_request(prompt, "agent"))
        assert await reader.wait_end() == {}
    (body,) = chat_requests(upstream, prompt)
    assert tool_names(body) == list(offered(Mode.AGENT, Switches(disabled_tools=(DISABLED,))))
    assert DISABLED not in tool_names(body) and "Write" in tool_names(body)
    async with http(configured) as client:
        available = await cc.unary(
            client,
            "/aiserver.v1.AiService/AvailableModels",
            aiserver_pb2.AvailableModelsRequest(),
            aiserver_pb2.AvailableModelsResponse,
        )
    flags = {
        m.name: (
            m.supports_images,
            m.supports_agent,
            m.supports_plan_mode,
            m.supports_non_max_mode,
            m.context_token_limit,
        )
        for m in available.models
    }
    assert flags["brain-vision"] == (True, True, True, True, 128_000)
    assert flags["brain-1"] == (False, True, True, True, 128_000)
    assert all(m.HasField("supports_images") for m in available.models)


# -- point 8: every ConversationAction --------------------------------------------------------


def last_checkpoint(reader: Reader) -> agent_pb2.ConversationStateStructure:
    states = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if m.HasField("conversation_checkpoint_update")
    ]
    assert states, reader.kinds
    return states[-1]


def _action_request(
    fill: Callable[[agent_pb2.ConversationAction], None],
    cid: str,
    state: agent_pb2.ConversationStateStructure | None = None,
) -> Any:
    req = agent_pb2.AgentRunRequest(conversation_id=cid)
    if state is not None:
        req.conversation_state.CopyFrom(state)
    req.requested_model.model_id = "brain-1"
    fill(req.action)
    return agent_pb2.AgentClientMessage(run_request=req)


def _cancel_subagent(a: agent_pb2.ConversationAction) -> None:
    a.cancel_subagent_action.subagent_id = "sub-1"


def _background_subagent(a: agent_pb2.ConversationAction) -> None:
    a.background_subagent_action.tool_call_id = "call_t1"


def _cancel(a: agent_pb2.ConversationAction) -> None:
    a.cancel_action.reason = "stop"


def _goal(a: agent_pb2.ConversationAction) -> None:
    a.goal_continuation_action.SetInParent()


def _future(a: agent_pb2.ConversationAction) -> None:
    """A variant newer than our schema: field 21 of the oneof, unknown here (issue 24)."""
    a.MergeFromString(bytes([0xAA, 0x01, 0x02, 0x08, 0x01]))


EMPTY_TURN = {
    "cancel_action": _cancel,
    # Issue 17: a cancel of a helper that is not running here, and a helper moved to the
    # background (the Task exec's answer carries that), end as empty turns.
    "cancel_subagent_action": _cancel_subagent,
    "background_subagent_action": _background_subagent,
    # Issue 24: deliberate (no CreateGoal tool here, so no goal to continue), and a future one.
    "goal_continuation_action": _goal,
    "future_action_21": _future,
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("action", list(EMPTY_TURN))
async def test_an_action_no_change_builds_ends_in_an_empty_successful_turn(
    server: ServerProcess, upstream: FakeUpstream, action: str, transport: str
) -> None:
    before = len(upstream.requests)
    async with open_run(server, transport) as (send, reader):
        await send(_action_request(EMPTY_TURN[action], str(uuid.uuid4())))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    assert reader.texts == [] and execs(reader) == []
    assert len(upstream.requests) == before


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_shell_command_action_is_recorded_for_the_next_turn(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """`!make test` typed into the chat: an empty successful turn, no model call; the command
    is in the history the next turn's model call reads. Each request carries the checkpoint
    the previous run ended with, as the IDE does."""
    cid = str(uuid.uuid4())
    command = f"make test-{uuid.uuid4().hex[:6]}"
    first = unique("hello first")
    async with open_run(server, transport) as (send, reader):
        await send(moded_request(first, "agent", cid))
        assert await reader.wait_end() == {}
    state = last_checkpoint(reader)

    def shell(a: agent_pb2.ConversationAction) -> None:
        a.shell_command_action.shell_command.command = command
        a.shell_command_action.exec_id = "e1"

    before = len(upstream.requests)
    async with open_run(server, transport) as (send, reader):
        await send(_action_request(shell, cid, state))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended and execs(reader) == []
    after = last_checkpoint(reader)
    assert len(after.turns) == len(state.turns) + 1  # the note is a turn of the checkpoint
    assert len(upstream.requests) == before
    later = unique("what did I run?")
    async with open_run(server, transport) as (send, reader):
        await send(moded_request(later, "agent", cid, state=after))
        assert await reader.wait_end() == {}
    (body,) = chat_requests(upstream, later)
    users = [m for m in body["messages"] if m["role"] == "user"]
    texts = [u["content"] if isinstance(u["content"], str) else json.dumps(u) for u in users]
    assert len(texts) == 3 and first in texts[0] and later in texts[2]
    assert command in texts[1] and "ran this command in their terminal" in texts[1]
    (earlier,) = chat_requests(upstream, first)
    n = len(earlier["messages"])
    assert json.dumps(body["messages"][:n]) == json.dumps(earlier["messages"])
