"""The MCP meta-tools end to end (issue 15, point 2): the real server process, the scripted
brain upstream, our Connect client playing an IDE that sends `McpMetaToolOptions` (inline
RequestContext field 34) with its flat MCP definitions, over `Run` on HTTP/2 and the HTTP/1.1
shim. Each test checks the exec the client gets, the card, the tool result the model reads in
the next upstream request, and that the turn ends normally."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cursor_byok.loop.catalogue import Mode, Switches, offered
from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_file_tools import VISION_MODEL, png
from tests.e2e.test_modes_actions import open_run
from tests.e2e.test_shim import Reader, chat_requests, exec_reply, kind, request_context, unique
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

TRANSPORTS = ["h2", "shim"]
META = ["GetMcpTools", "CallMcpTool", "FetchMcpResource", "ListMcpResources"]
RETENTION = "Logs are kept for 30 days."
IMAGE = png(3, 2)

# The IDE's flat definition of lookup_docs: its own name differs from the tool's name on the
# server, so the test sees McpArgs.name come from the definition.
FLAT_NAME = "mcp_docs-server_lookup_docs"


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("mcp-meta")
    config = brain_config(upstream.base_url, db=work / "byok.db") + VISION_MODEL
    with server_process(config, work) as srv:
        yield srv


def descriptors(reverse: bool = False) -> agent_pb2.McpMetaToolOptions:
    """Two servers, deliberately not in identifier order (and reversible) to show the prompt
    does not depend on the client's order."""
    zeta = agent_pb2.McpDescriptor(
        server_name="Zeta tracker", server_identifier="zeta-srv", server_use_instructions=""
    )
    zeta.tools.add(tool_name="open_ticket", description="Open a ticket.")
    docs = agent_pb2.McpDescriptor(
        server_name="Team docs",
        server_identifier="docs-server",
        server_use_instructions="Use it for questions about the team's policies.",
    )
    docs.tools.add(
        tool_name="search_pages",
        description="Search the pages by words.",
        input_schema_json='{"type": "object", "properties": {"words": {"type": "string"}}}',
    )
    docs.tools.add(tool_name="lookup_docs", description="Look something up in the docs.")
    options = agent_pb2.McpMetaToolOptions(enabled=True)
    servers = [zeta, docs]
    for d in reversed(servers) if reverse else servers:
        options.mcp_descriptors.append(d)
    return options


def meta_request(
    text: str,
    *,
    model: str = "brain-1",
    conversation_id: str | None = None,
    reverse: bool = False,
    enabled: bool = True,
    mode: agent_pb2.AgentMode | None = None,
) -> agent_pb2.AgentClientMessage:
    req = agent_pb2.AgentRunRequest(conversation_id=conversation_id or str(uuid.uuid4()))
    req.requested_model.model_id = model
    uma = req.action.user_message_action
    uma.user_message.text = text
    uma.user_message.message_id = str(uuid.uuid4())
    if mode is not None:
        uma.user_message.mode = mode
    rc = request_context()
    options = descriptors(reverse)
    options.enabled = enabled
    rc.mcp_meta_tool_options.CopyFrom(options)
    uma.request_context.CopyFrom(rc)
    req.mcp_tools.mcp_tools.append(
        agent_pb2.McpToolDefinition(
            name=FLAT_NAME,
            tool_name="lookup_docs",
            provider_identifier="docs-server",
            description="Look something up in the team's docs.",
            input_schema_json='{"type": "object", "properties": {"q": {"type": "string"}}}',
        )
    )
    return agent_pb2.AgentClientMessage(run_request=req)


def tool_call(name: str, args: dict[str, Any]) -> str:
    return unique(f"[tool {name} {json.dumps(args)}]")


Answer = Callable[[agent_pb2.ExecServerMessage], agent_pb2.AgentClientMessage]


async def play(
    server: ServerProcess, transport: str, request: agent_pb2.AgentClientMessage, answer: Answer
) -> tuple[Reader, list[agent_pb2.ExecServerMessage]]:
    """One turn; every exec the server sends is answered by `answer`, until the end-stream."""
    sent: list[agent_pb2.ExecServerMessage] = []
    async with open_run(server, transport) as (send, reader):
        await send(request)
        seen: set[int] = set()
        deadline = time.monotonic() + 30
        while reader.end is None and not reader.closed:
            assert time.monotonic() < deadline, reader.kinds
            for m in reader.messages:
                if m.HasField("exec_server_message") and m.exec_server_message.id not in seen:
                    seen.add(m.exec_server_message.id)
                    sent.append(m.exec_server_message)
                    await send(answer(m.exec_server_message))
            await asyncio.sleep(0.02)
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended, (end, reader.kinds)
    return reader, sent


def no_exec(esm: agent_pb2.ExecServerMessage) -> agent_pb2.AgentClientMessage:
    raise AssertionError(f"no exec expected, got {esm.WhichOneof('message')}")


def mcp_text(text: str, *images: bytes) -> Answer:
    def answer(esm: agent_pb2.ExecServerMessage) -> agent_pb2.AgentClientMessage:
        assert esm.WhichOneof("message") == "mcp_args", esm
        ok = agent_pb2.McpSuccess()
        ok.content.add().text.text = text
        for data in images:
            ok.content.add().image.CopyFrom(
                agent_pb2.McpImageContent(data=data, mime_type="image/png")
            )
        return exec_reply(esm.id, mcp_result=agent_pb2.McpResult(success=ok))

    return answer


def cards(reader: Reader, event: str = "tool_call_completed") -> list[agent_pb2.ToolCall]:
    return [
        getattr(m.interaction_update, event).tool_call
        for m in reader.messages
        if kind(m) == f"interaction_update.{event}"
    ]


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def assert_extends(first: dict[str, Any], second: dict[str, Any]) -> None:
    """The second request of the turn starts with the first's messages, byte for byte, with
    the same tools and system prompt."""
    assert json.dumps(second["tools"]) == json.dumps(first["tools"])
    prefix = second["messages"][: len(first["messages"])]
    assert json.dumps(prefix) == json.dumps(first["messages"])
    assert len(second["messages"]) > len(first["messages"])


# -- what is offered --------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_meta_tools_replace_the_flat_mcp_tools_and_the_prompt_lists_the_servers(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    first, second = unique("which tools"), unique("which tools again")
    await play(server, transport, meta_request(first), no_exec)
    await play(server, transport, meta_request(second, reverse=True), no_exec)
    (a,) = chat_requests(upstream, first)
    (b,) = chat_requests(upstream, second)
    names = tool_names(a)
    assert names == list(offered(Mode.AGENT, Switches(mcp_meta_tools=True)))
    assert names[-4:] == META and "lookup_docs" not in names and FLAT_NAME not in names
    system = a["messages"][0]["content"]
    docs = system.index("- Team docs (server identifier: docs-server). Tools: lookup_docs, ")
    zeta = system.index("- Zeta tracker (server identifier: zeta-srv). Tools: open_ticket")
    assert docs < zeta  # sorted by identifier, whatever order the client sent
    assert "  Use it for questions about the team's policies." in system
    # Same descriptors in another order: byte-identical tools and system prompt (prompt cache).
    assert json.dumps(b["tools"]) == json.dumps(a["tools"])
    assert b["messages"][0] == a["messages"][0]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_plan_mode_without_get_mcp_tools_lists_the_schemas_in_the_prompt(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique("plan with mcp")
    request = meta_request(prompt, mode=agent_pb2.AGENT_MODE_PLAN)
    await play(server, transport, request, no_exec)
    (body,) = chat_requests(upstream, prompt)
    names = tool_names(body)
    assert names == list(offered(Mode.PLAN, Switches(mcp_meta_tools=True)))
    assert "CallMcpTool" in names and "GetMcpTools" not in names
    system = body["messages"][0]["content"]
    assert (
        "  - lookup_docs: Look something up in the docs. Arguments: "
        '{"properties": {"q": {"type": "string"}}, "type": "object"}'
    ) in system
    assert "GetMcpTools" not in system


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_meta_disabled_keeps_the_flat_mcp_tools(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique("flat please")
    await play(server, transport, meta_request(prompt, enabled=False), no_exec)
    (body,) = chat_requests(upstream, prompt)
    assert tool_names(body) == [*offered(Mode.AGENT), "lookup_docs"]
    assert "server identifier" not in body["messages"][0]["content"]


# -- CallMcpTool ------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_call_mcp_tool_reaches_the_client_as_mcp_args_with_the_server_identifier(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    args = {
        "server": "docs-server",
        "toolName": "lookup_docs",
        "arguments": {"q": "retention"},
        "description": "Look up the log retention policy",
    }
    prompt = tool_call("CallMcpTool", args)
    reader, sent = await play(server, transport, meta_request(prompt), mcp_text(RETENTION))
    (esm,) = sent
    ma = esm.mcp_args
    assert (ma.server_identifier, ma.name, ma.provider_identifier, ma.tool_name) == (
        "docs-server",
        FLAT_NAME,
        "docs-server",
        "lookup_docs",
    )
    assert ma.args["q"].string_value == "retention" and ma.tool_call_id == "call_t1"
    (started,) = cards(reader, "tool_call_started")
    assert started.mcp_tool_call.description == "Look up the log retention policy"
    (done,) = cards(reader)
    assert done.mcp_tool_call.args == ma
    assert done.mcp_tool_call.description == "Look up the log retention policy"
    assert done.mcp_tool_call.result.success.content[0].text.text == RETENTION
    first, second = chat_requests(upstream, prompt)
    (result,) = tool_results(second)
    assert result["tool_call_id"] == "call_t1" and result["content"] == RETENTION
    assert_extends(first, second)
    assert f"The tool said: {RETENTION}" in "".join(reader.texts)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_call_mcp_tool_of_a_tool_only_the_descriptors_list(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """No flat definition: the call goes by the tool's own name on its server."""
    args = {"server": "Team docs", "toolName": "search_pages", "arguments": {"words": "logs"}}
    prompt = tool_call("CallMcpTool", args)
    _, sent = await play(server, transport, meta_request(prompt), mcp_text("2 pages"))
    (esm,) = sent
    ma = esm.mcp_args
    assert (ma.server_identifier, ma.name, ma.provider_identifier, ma.tool_name) == (
        "docs-server",
        "search_pages",
        "docs-server",
        "search_pages",
    )
    _, second = chat_requests(upstream, prompt)
    assert tool_results(second)[0]["content"] == "2 pages"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            {"server": "nowhere", "toolName": "lookup_docs"},
            "Error: there is no MCP server 'nowhere'. Servers: docs-server, zeta-srv.",
        ),
        (
            {"server": "docs-server", "toolName": "drop_tables"},
            "Error: the MCP server 'docs-server' has no tool 'drop_tables'. Its tools: "
            "lookup_docs, search_pages.",
        ),
    ],
    ids=["server", "tool"],
)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_wrong_server_or_tool_is_an_error_result_and_nothing_is_sent(
    server: ServerProcess,
    upstream: FakeUpstream,
    transport: str,
    args: dict[str, str],
    expected: str,
) -> None:
    prompt = tool_call("CallMcpTool", args)
    reader, sent = await play(server, transport, meta_request(prompt), no_exec)
    assert sent == []
    (done,) = cards(reader)
    assert done.mcp_tool_call.result.error.error.startswith(expected)
    first, second = chat_requests(upstream, prompt)
    (result,) = tool_results(second)
    assert result["content"].startswith(expected)
    assert_extends(first, second)


# -- images -----------------------------------------------------------------------------------


def image_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        part
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for part in m["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    ]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_image_result_reaches_a_vision_model_as_an_image(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    args = {"server": "docs-server", "toolName": "lookup_docs", "arguments": {"q": "chart"}}
    prompt = tool_call("CallMcpTool", args)
    request = meta_request(prompt, model="brain-vision")
    await play(server, transport, request, mcp_text("The chart:", IMAGE))
    first, second = chat_requests(upstream, prompt)
    (image,) = image_parts(second)
    assert image["image_url"]["url"].startswith("data:image/png;base64,")
    assert tool_results(second)[0]["content"] == "The chart:"
    assert_extends(first, second)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_image_result_is_a_note_for_a_model_without_vision(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    args = {"server": "docs-server", "toolName": "lookup_docs", "arguments": {"q": "chart"}}
    prompt = tool_call("CallMcpTool", args)
    reader, _ = await play(server, transport, meta_request(prompt), mcp_text("The chart:", IMAGE))
    _, second = chat_requests(upstream, prompt)
    assert image_parts(second) == []
    assert tool_results(second)[0]["content"] == (
        f"The chart:\n[The tool returned an image (image/png, {len(IMAGE)} bytes); this model "
        "cannot view images: not shown]"
    )
    (done,) = cards(reader)  # the IDE's card still carries the image
    assert done.mcp_tool_call.result.success.content[1].image.data == IMAGE


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_flat_mcp_tool_image_is_a_note_for_a_model_without_vision(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """The same rule for the flat per-tool MCP machine (meta off)."""
    prompt = tool_call("lookup_docs", {"q": "chart"})
    request = meta_request(prompt, enabled=False)
    _, sent = await play(server, transport, request, mcp_text("The chart:", IMAGE))
    assert sent[0].mcp_args.name == FLAT_NAME and not sent[0].mcp_args.server_identifier
    first, second = chat_requests(upstream, prompt)
    assert image_parts(second) == []
    assert "this model cannot view images: not shown]" in tool_results(second)[0]["content"]
    assert_extends(first, second)


# -- GetMcpTools ------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_get_mcp_tools_is_answered_from_the_descriptors(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = tool_call("GetMcpTools", {"server": "docs-server"})
    reader, sent = await play(server, transport, meta_request(prompt), no_exec)
    assert sent == []
    expected = (
        "MCP server docs-server (Team docs):\n"
        "- lookup_docs: Look something up in the docs.\n"
        '  Input schema: {"properties": {"q": {"type": "string"}}, "type": "object"}\n'
        "- search_pages: Search the pages by words.\n"
        '  Input schema: {"properties": {"words": {"type": "string"}}, "type": "object"}'
    )
    (done,) = cards(reader)
    get = done.get_mcp_tools_tool_call
    assert (get.args.server, get.args.tool_call_id) == ("docs-server", "call_t1")
    assert get.result.success.content == expected
    first, second = chat_requests(upstream, prompt)
    assert tool_results(second)[0]["content"] == expected
    assert_extends(first, second)


# -- resources --------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_fetch_mcp_resource_reads_it_on_the_client(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    uri = "docs://policies/retention.md"

    def answer(esm: agent_pb2.ExecServerMessage) -> agent_pb2.AgentClientMessage:
        assert esm.WhichOneof("message") == "read_mcp_resource_exec_args", esm
        ok = agent_pb2.ReadMcpResourceSuccess(uri=uri, mime_type="text/markdown", text=RETENTION)
        result = agent_pb2.ReadMcpResourceExecResult(success=ok)
        return exec_reply(esm.id, read_mcp_resource_exec_result=result)

    prompt = tool_call("FetchMcpResource", {"server": "docs-server", "uri": uri})
    reader, sent = await play(server, transport, meta_request(prompt), answer)
    (esm,) = sent
    args = esm.read_mcp_resource_exec_args
    assert (args.server, args.uri, args.tool_call_id) == ("docs-server", uri, "call_t1")
    assert not args.HasField("download_path")
    (done,) = cards(reader)
    card = done.read_mcp_resource_tool_call
    assert card.args == args and card.result.success.text == RETENTION
    first, second = chat_requests(upstream, prompt)
    expected = f"MCP resource {uri} (text/markdown):\n{RETENTION}"
    assert tool_results(second)[0]["content"] == expected
    assert_extends(first, second)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_list_mcp_resources_lists_them_on_the_client(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    def answer(esm: agent_pb2.ExecServerMessage) -> agent_pb2.AgentClientMessage:
        assert esm.WhichOneof("message") == "list_mcp_resources_exec_args", esm
        ok = agent_pb2.ListMcpResourcesSuccess()
        ok.resources.add(
            uri="docs://policies/retention.md",
            name="Retention",
            description="How long we keep logs",
            server="docs-server",
        )
        result = agent_pb2.ListMcpResourcesExecResult(success=ok)
        return exec_reply(esm.id, list_mcp_resources_exec_result=result)

    prompt = tool_call("ListMcpResources", {"server": "docs-server"})
    reader, sent = await play(server, transport, meta_request(prompt), answer)
    (esm,) = sent
    assert esm.list_mcp_resources_exec_args.server == "docs-server"
    (done,) = cards(reader)
    card = done.list_mcp_resources_tool_call
    assert card.args.server == "docs-server"
    assert card.result.success.resources[0].uri == "docs://policies/retention.md"
    first, second = chat_requests(upstream, prompt)
    assert tool_results(second)[0]["content"] == (
        "- docs://policies/retention.md (Retention) [server docs-server]: How long we keep logs"
    )
    assert_extends(first, second)


# -- one conversation -------------------------------------------------------------------------


def any_exec(esm: agent_pb2.ExecServerMessage) -> agent_pb2.AgentClientMessage:
    match esm.WhichOneof("message"):
        case "mcp_args":
            return mcp_text(RETENTION)(esm)
        case "read_mcp_resource_exec_args":
            ok = agent_pb2.ReadMcpResourceSuccess(uri=esm.read_mcp_resource_exec_args.uri, text="x")
            result = agent_pb2.ReadMcpResourceExecResult(success=ok)
            return exec_reply(esm.id, read_mcp_resource_exec_result=result)
        case "list_mcp_resources_exec_args":
            empty = agent_pb2.ListMcpResourcesExecResult(
                success=agent_pb2.ListMcpResourcesSuccess()
            )
            return exec_reply(esm.id, list_mcp_resources_exec_result=empty)
        case other:
            raise AssertionError(f"unexpected exec {other}")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_conversation_of_meta_tool_turns_extends_byte_for_byte(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """Four turns of one conversation, each calling another meta-tool: every upstream request
    begins with the previous one's messages exactly, with the same tools and system prompt."""
    cid, tag = str(uuid.uuid4()), uuid.uuid4().hex[:8]
    turns = [
        ("GetMcpTools", {"toolName": "lookup_docs", "server": "docs-server"}),
        ("CallMcpTool", {"server": "docs-server", "toolName": "lookup_docs", "arguments": {}}),
        ("ListMcpResources", {}),
        ("FetchMcpResource", {"server": "docs-server", "uri": "docs://a"}),
    ]
    for name, args in turns:
        prompt = f"[tool {name} {json.dumps(args)}] #{tag}"
        request = meta_request(prompt, conversation_id=cid, reverse=name == "ListMcpResources")
        await play(server, transport, request, any_exec)
    bodies = [
        json.loads(r.body)
        for r in list(upstream.requests)
        if f"#{tag}" in json.dumps(json.loads(r.body)["messages"][1])
    ]
    assert len(bodies) == 2 * len(turns)
    for before, after in itertools.pairwise(bodies):
        assert {k: v for k, v in before.items() if k != "messages"} == {
            k: v for k, v in after.items() if k != "messages"
        }
        assert_extends(before, after)
    assert len(tool_results(bodies[-1])) == len(turns)


async def test_the_prefix_holds_across_a_restart_between_meta_tool_turns(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A new process rebuilds the history (and the stored turn context with its MCP servers)
    from the store: the next turn's requests still extend the last ones byte for byte."""
    work = tmp_path_factory.mktemp("mcp-meta-restart")
    config = brain_config(upstream.base_url, db=work / "byok.db")
    cid, tag = str(uuid.uuid4()), uuid.uuid4().hex[:8]
    turns = [
        ("CallMcpTool", {"server": "docs-server", "toolName": "lookup_docs", "arguments": {}}),
        ("GetMcpTools", {"pattern": "lookup"}),
    ]
    for name, args in turns:
        with server_process(config, work) as srv:
            prompt = f"[tool {name} {json.dumps(args)}] #{tag}"
            await play(srv, "shim", meta_request(prompt, conversation_id=cid), any_exec)
    bodies = [
        json.loads(r.body)
        for r in list(upstream.requests)
        if f"#{tag}" in json.dumps(json.loads(r.body)["messages"][1])
    ]
    assert len(bodies) == 2 * len(turns)
    for before, after in itertools.pairwise(bodies):
        assert_extends(before, after)
