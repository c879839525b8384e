"""Issue 24 §6: an MCP tool the client describes only by its definition file
(`McpToolDescriptor.definition_path`) is offered with the file's description and schema, read
through the client once per run before the first model call; a file the client cannot read
leaves the tool offered with a note, logged once. End to end over HTTP/2 and the shim."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_mcp_meta import meta_request, play, server  # noqa: F401 (fixture)
from tests.e2e.test_modes_actions import TRANSPORTS
from tests.e2e.test_shim import chat_requests, unique
from tests.support.live import ServerProcess
from tests.support.upstream import FakeUpstream

GOOD = "/home/u/.cursor/projects/ws/mcps/kb/tools/find_article.json"
BROKEN = "/home/u/.cursor/projects/ws/mcps/kb/tools/broken.json"
FILES = {
    GOOD: json.dumps(
        {
            "name": "find_article",
            "description": "Find a knowledge-base article by title words.",
            "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}},
        }
    ),
}


def with_file_tools(message: agent_pb2.AgentClientMessage) -> agent_pb2.AgentClientMessage:
    options = message.run_request.action.user_message_action.request_context.mcp_meta_tool_options
    kb = options.mcp_descriptors.add(server_name="Knowledge base", server_identifier="kb")
    kb.tools.add(tool_name="find_article", definition_path=GOOD)
    kb.tools.add(tool_name="broken_tool", definition_path=BROKEN)
    return message


def answer_reads(reads: list[str]) -> Any:
    def answer(esm: agent_pb2.ExecServerMessage) -> agent_pb2.AgentClientMessage:
        assert esm.WhichOneof("message") == "read_args", esm
        path = esm.read_args.path
        reads.append(path)
        reply = agent_pb2.AgentClientMessage()
        reply.exec_client_message.id = esm.id
        if path in FILES:
            reply.exec_client_message.read_result.success.path = path
            reply.exec_client_message.read_result.success.content = FILES[path]
        else:
            reply.exec_client_message.read_result.file_not_found.SetInParent()
        return reply

    return answer


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_tool_known_by_its_file_is_offered_with_the_files_description_and_schema(
    server: ServerProcess,  # noqa: F811
    upstream: FakeUpstream,
    transport: str,
) -> None:
    prompt = unique("plan with file tools")
    request = with_file_tools(meta_request(prompt, mode=agent_pb2.AGENT_MODE_PLAN))
    reads: list[str] = []
    _reader, sent = await play(server, transport, request, answer_reads(reads))
    # Each file read once, before the model call (the only execs of the run).
    assert sorted(reads) == sorted([GOOD, BROKEN])
    assert [e.WhichOneof("message") for e in sent] == ["read_args", "read_args"]
    (body,) = chat_requests(upstream, prompt)
    system = body["messages"][0]["content"]
    assert (
        "  - find_article: Find a knowledge-base article by title words. Arguments: "
        '{"properties": {"title": {"type": "string"}}, "type": "object"}'
    ) in system
    assert f"(Its definition file {BROKEN} could not be read: the client answered " in system
    assert "(no description)" not in system.split("Knowledge base")[1]
    logged = [line for line in server.log().splitlines() if BROKEN in line]
    assert len(logged) == 1  # once per file per process, whichever transport ran first
