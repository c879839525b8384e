"""The IDE's context as Cursor 3.13+ sends it (reference §4), over `Run` on HTTP/2 and the shim:
turn 1 dual (the context inline and as `request_context_parts` blobs), turns 2 and 3 ref_only
(the blobs only: a dynamic_context with no rules and no tools, an empty `mcp_tools`).

Each blob is read by the schema its referencing field names (RequestContextRulesPart,
...SkillsPart, ...SubagentsPart, ...McpsPart). The flat MCP tool of the mcps blob is offered on
every turn and its call reaches the client as `mcp_args`; the rules blob's rule is in every
system prompt; a blob fetched once is not asked for again. A blob the client cannot serve
(`GetBlobResult.error`, or an empty result as the third-party client answers) is read from the
copy kept with the conversation, also after a restart, and the server log says so.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_prefix_every_tool import conversation_bodies, session
from tests.e2e.test_shim import content_text, exec_reply, kind
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

WORKSPACE = "/home/tester/parts"
TOOL = "kb_lookup"
SERVER = "kb-server"
ANSWER = "Logs are kept for 30 days."


def rule_of(tag: str, n: int = 1) -> str:
    return f"Always cite PARTS-RULE-{n}-{tag}."


def rules_part(tag: str, n: int = 1) -> bytes:
    part = a.RequestContextRulesPart()
    part.rules.add(full_path=f"{WORKSPACE}/.cursor/rules/cite.mdc", content=rule_of(tag, n))
    part.non_file_rules.add(content=f"Answer briefly ({tag}).")
    part.cloud_rule = f"Team rule ({tag})."
    return part.SerializeToString()


def skills_part(tag: str) -> bytes:
    part = a.RequestContextSkillsPart()
    part.agent_skills.add(
        full_path=f"{WORKSPACE}/.cursor/skills/review/SKILL.md", description=f"Reviews {tag}"
    )
    return part.SerializeToString()


def subagents_part(tag: str) -> bytes:
    part = a.RequestContextSubagentsPart()
    part.custom_subagents.add(name="explore", description=tag, prompt="Look.", model="inherit")
    return part.SerializeToString()


def mcp_definition(
    description: str = "Look something up in the team's knowledge base.",
) -> a.McpToolDefinition:
    return a.McpToolDefinition(
        name=TOOL,
        tool_name=TOOL,
        provider_identifier=SERVER,
        description=description,
        input_schema_json='{"type": "object", "properties": {"q": {"type": "string"}}}',
    )


def mcps_part(tag: str, description: str | None = None) -> bytes:
    part = a.RequestContextMcpsPart()
    part.tools.append(mcp_definition(description or f"Look something up ({tag})."))
    part.mcp_instructions.add(
        server_name="Knowledge", server_identifier=SERVER, instructions=f"Ask kb first ({tag})."
    )
    part.mcp_meta_tool_options.enabled = False
    return part.SerializeToString()


@dataclass
class Blobs:
    """The four context blobs of one turn, by kind."""

    data: dict[str, bytes]

    def ids(self) -> dict[str, bytes]:
        return {k: hashlib.sha256(v).digest() for k, v in self.data.items()}

    def by_id(self) -> dict[bytes, bytes]:
        return {hashlib.sha256(v).digest(): v for v in self.data.values()}


def blobs_of(tag: str) -> Blobs:
    return Blobs(
        {
            "rules": rules_part(tag),
            "skills": skills_part(tag),
            "subagents": subagents_part(tag),
            "mcps": mcps_part(tag),
        }
    )


def env(rc: a.RequestContext) -> None:
    rc.env.os_version = "linux parts-e2e"
    rc.env.workspace_paths.append(WORKSPACE)
    rc.env.shell = "bash"


def turn_request(text: str, cid: str, blobs: Blobs, *, dual: bool) -> a.AgentClientMessage:
    """dual: the context inline too, with the MCP tool on the run request (turn 1);
    else ref_only: a dynamic_context with no rules and no tools, an empty mcp_tools."""
    req = a.AgentRunRequest(conversation_id=cid)
    req.requested_model.model_id = "brain-1"
    uma = req.action.user_message_action
    uma.user_message.text = text
    uma.user_message.message_id = str(uuid.uuid4())
    parts = req.action.request_context_parts
    for kind_, blob_id in blobs.ids().items():
        setattr(parts, f"{kind_}_blob_id", blob_id)
        setattr(parts, f"{kind_}_byte_length", len(blobs.data[kind_]))
    env(parts.dynamic_context)
    if dual:
        inline = uma.request_context
        env(inline)
        rules = a.RequestContextRulesPart.FromString(blobs.data["rules"])
        inline.rules.extend(rules.rules)  # the same rules as the blob's, as the IDE sends them
        inline.non_file_rules.extend(rules.non_file_rules)
        inline.tools.append(mcp_definition())
        req.mcp_tools.mcp_tools.append(mcp_definition())
    else:
        req.mcp_tools.SetInParent()  # present, but empty, as the IDE sends it
    return a.AgentClientMessage(run_request=req)


@dataclass
class Client:
    """The IDE's blob store: `serve` answers get_blob, `refuse` names blobs it cannot serve
    ("error": GetBlobResult.error, "empty": an empty GetBlobResult, "zero-bytes": blob_data
    set to no bytes)."""

    serve: dict[bytes, bytes] = field(default_factory=dict)
    refuse: dict[bytes, str] = field(default_factory=dict)
    stored: dict[bytes, bytes] = field(default_factory=dict)

    def answer_kv(self, kv: a.KvServerMessage, asked: list[bytes]) -> a.AgentClientMessage:
        reply = a.AgentClientMessage()
        reply.kv_client_message.id = kv.id
        if kv.HasField("set_blob_args"):
            self.stored[bytes(kv.set_blob_args.blob_id)] = bytes(kv.set_blob_args.blob_data)
            reply.kv_client_message.set_blob_result.SetInParent()
            return reply
        blob_id = bytes(kv.get_blob_args.blob_id)
        asked.append(blob_id)
        result = reply.kv_client_message.get_blob_result
        result.SetInParent()
        how = self.refuse.get(blob_id)
        if how == "error":
            result.error.message = "blob not found in this window"
        elif how == "zero-bytes":
            result.blob_data = b""
        elif how is None:
            data = self.serve.get(blob_id, self.stored.get(blob_id))
            if data is not None:
                result.blob_data = data
        return reply


@dataclass
class Turn:
    kinds: list[str]
    asked: list[bytes]  # get_blob_args ids, in order
    mcp_args: list[a.McpArgs]
    completed: list[str]


def mcp_reply(exec_id: int) -> a.AgentClientMessage:
    ok = a.McpSuccess()
    ok.content.add().text.text = ANSWER
    return exec_reply(exec_id, mcp_result=a.McpResult(success=ok))


async def play(
    server: ServerProcess, transport: str, request: a.AgentClientMessage, client: Client
) -> Turn:
    asked: list[bytes] = []
    mcp: list[a.McpArgs] = []
    async with session(server, transport) as (send, reader):
        reader.auto_kv = False
        await send(request)
        done = 0
        deadline = time.monotonic() + 30
        while reader.end is None and not reader.closed:
            assert time.monotonic() < deadline, reader.kinds
            messages = reader.messages
            for m in messages[done:]:
                if m.HasField("kv_server_message"):
                    await send(client.answer_kv(m.kv_server_message, asked))
                elif m.exec_server_message.WhichOneof("message") == "mcp_args":
                    mcp.append(m.exec_server_message.mcp_args)
                    await send(mcp_reply(m.exec_server_message.id))
            done = len(messages)
            await asyncio.sleep(0.02)
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended, (end, reader.kinds)
    completed = [
        str(m.interaction_update.tool_call_completed.tool_call.WhichOneof("tool"))
        for m in reader.messages
        if kind(m) == "interaction_update.tool_call_completed"
    ]
    return Turn(reader.kinds, asked, mcp, completed)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def tool_results(body: dict[str, Any]) -> list[str]:
    return [content_text(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def call_prompt(tag: str, q: str) -> str:
    return f'[tool {TOOL} {{"q": "{q}"}}] #{tag}'


def assert_mcp_call(turn: Turn, q: str) -> None:
    assert len(turn.mcp_args) == 1, turn.kinds
    args = turn.mcp_args[0]
    assert (args.name, args.tool_name, args.provider_identifier) == (TOOL, TOOL, SERVER)
    assert {k: v.string_value for k, v in args.args.items()} == {"q": q}
    assert args.tool_call_id == "call_t1"
    assert turn.completed == ["mcp_tool_call"]


def assert_context_reached_the_model(body: dict[str, Any], tag: str, rule: str) -> None:
    system = body["messages"][0]["content"]
    assert body["messages"][0]["role"] == "system"
    assert rule in system
    assert f"Answer briefly ({tag})." in system
    assert f"Rule from the team's settings:\nTeam rule ({tag})." in system  # cloud_rule (3)
    assert f"Reviews {tag}" in system  # the skills blob
    assert f"Instructions from MCP server Knowledge:\nAsk kb first ({tag})." in system
    assert "linux parts-e2e" in system  # the dynamic context
    assert tool_names(body).count(TOOL) == 1


@pytest.mark.parametrize("transport", ["h2", "shim"])
async def test_dual_then_ref_only_keeps_mcp_and_rules_on_every_turn(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    tag, cid = uuid.uuid4().hex[:8], str(uuid.uuid4())
    blobs = blobs_of(tag)
    client = Client(serve=blobs.by_id())

    one = await play(
        server, transport, turn_request(f"hello #{tag}", cid, blobs, dual=True), client
    )
    assert sorted(one.asked) == sorted(blobs.ids().values())  # each blob once, all at once
    two = await play(
        server,
        transport,
        turn_request(call_prompt(tag, "retention"), cid, blobs, dual=False),
        client,
    )
    assert two.asked == []  # fetched on turn 1: not asked again
    assert_mcp_call(two, "retention")
    three = await play(
        server, transport, turn_request(call_prompt(tag, "backups"), cid, blobs, dual=False), client
    )
    assert three.asked == []
    assert_mcp_call(three, "backups")

    bodies = conversation_bodies(upstream, tag)
    assert len(bodies) == 5  # turn 1: one call; turns 2 and 3: the tool call, then the answer
    for body in bodies:
        assert_context_reached_the_model(body, tag, rule_of(tag))
    # the model read each MCP result as the tool's result
    assert tool_results(bodies[2]) == [ANSWER]
    assert tool_results(bodies[4]) == [ANSWER, ANSWER]
    # ref_only turns carry the same system prompt and tools: the prefix survives
    assert len({json.dumps((b["messages"][0], b.get("tools"))) for b in bodies}) == 1


@pytest.mark.parametrize("transport", ["h2", "shim"])
@pytest.mark.parametrize("refusal", ["error", "empty", "zero-bytes"])
async def test_a_blob_the_client_refuses_falls_back_to_the_kept_copy(
    server: ServerProcess, upstream: FakeUpstream, transport: str, refusal: str
) -> None:
    tag, cid = uuid.uuid4().hex[:8], str(uuid.uuid4())
    blobs = blobs_of(tag)
    client = Client(serve=blobs.by_id())
    await play(server, transport, turn_request(f"hello #{tag}", cid, blobs, dual=True), client)
    two = await play(
        server,
        transport,
        turn_request(call_prompt(tag, "retention"), cid, blobs, dual=False),
        client,
    )
    assert_mcp_call(two, "retention")

    # turn 3: the mcps and rules blobs changed (new ids) and the client cannot serve them
    changed = Blobs({**blobs.data, "mcps": mcps_part(tag, "changed"), "rules": rules_part(tag, 2)})
    refused = [changed.ids()["rules"], changed.ids()["mcps"]]
    client.refuse = dict.fromkeys(refused, refusal)
    before = len(server.log())
    three = await play(
        server,
        transport,
        turn_request(call_prompt(tag, "backups"), cid, changed, dual=False),
        client,
    )
    assert sorted(three.asked) == sorted(refused)  # the unchanged ones are kept, not asked
    assert_mcp_call(three, "backups")  # the kept mcps copy still routes the call

    bodies = conversation_bodies(upstream, tag)
    assert len(bodies) == 5
    for body in bodies:  # turn 3 too: the kept copies of the rules and mcps blobs
        assert_context_reached_the_model(body, tag, rule_of(tag))
    assert rule_of(tag, 2) not in bodies[-1]["messages"][0]["content"]
    assert tool_results(bodies[4]) == [ANSWER, ANSWER]

    why = (
        "it answered with an error: blob not found in this window"
        if refusal == "error"
        else "it answered with no data"
    )
    log = await _log_after(server, before, "could not serve the mcps blob")
    for part in ("rules", "mcps"):
        line = (
            f"conversation {cid}: the client could not serve the {part} blob ({why}); using the "
            "copy kept from an earlier turn"
        )
        assert line in log, log


async def _log_after(server: ServerProcess, offset: int, needle: str) -> str:
    deadline = time.monotonic() + 5
    while True:
        text = server.log()[offset:]
        if needle in text or time.monotonic() > deadline:
            return text
        await asyncio.sleep(0.05)


@pytest.fixture()
def own_server(upstream: FakeUpstream, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    yield brain_config(upstream.base_url, db=tmp_path / "byok.db"), tmp_path


async def test_the_kept_copy_survives_a_restart(
    upstream: FakeUpstream, own_server: tuple[str, Path]
) -> None:
    """After a restart the server's blob cache is empty; the blobs kept with the conversation
    are read from the store: unchanged ones are not asked for, a refused one falls back."""
    config, work = own_server
    tag, cid = uuid.uuid4().hex[:8], str(uuid.uuid4())
    blobs = blobs_of(tag)
    client = Client(serve=blobs.by_id())
    with server_process(config, work) as first:
        await play(first, "shim", turn_request(f"hello #{tag}", cid, blobs, dual=True), client)
    changed = Blobs({**blobs.data, "mcps": mcps_part(tag, "changed")})
    client.refuse = {changed.ids()["mcps"]: "empty"}
    with server_process(config, work) as second:
        turn = await play(
            second,
            "shim",
            turn_request(call_prompt(tag, "restart"), cid, changed, dual=False),
            client,
        )
        log = await _log_after(second, 0, "could not serve the mcps blob")
    assert turn.asked == [changed.ids()["mcps"]]  # rules, skills, subagents: from the store
    assert_mcp_call(turn, "restart")
    assert "could not serve the mcps blob (it answered with no data); using the copy" in log
    bodies = conversation_bodies(upstream, tag)
    assert len(bodies) == 3
    for body in bodies:
        assert_context_reached_the_model(body, tag, rule_of(tag))


@pytest.mark.parametrize("transport", ["h2", "shim"])
async def test_a_turn_without_parts_carries_the_kept_copies_on(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """Turn 2 names no parts (its context inline only, as a Build with its own context or a
    legacy request): turn 3's refused mcps blob still falls back to turn 1's copy."""
    tag, cid = uuid.uuid4().hex[:8], str(uuid.uuid4())
    blobs = blobs_of(tag)
    client = Client(serve=blobs.by_id())
    await play(server, transport, turn_request(f"hello #{tag}", cid, blobs, dual=True), client)
    legacy = turn_request(f"inline only #{tag}", cid, blobs, dual=True)
    legacy.run_request.action.ClearField("request_context_parts")
    two = await play(server, transport, legacy, client)
    assert two.asked == []
    changed = Blobs({**blobs.data, "mcps": mcps_part(tag, "changed")})
    client.refuse = {changed.ids()["mcps"]: "error"}
    three = await play(
        server, transport, turn_request(call_prompt(tag, "later"), cid, changed, dual=False), client
    )
    assert three.asked == [changed.ids()["mcps"]]
    assert_mcp_call(three, "later")
    body = conversation_bodies(upstream, tag)[-1]
    assert_context_reached_the_model(body, tag, rule_of(tag))


# -- the MCP meta-tools through the mcps blob ---------------------------------------------------

META_TOOLS = ["GetMcpTools", "CallMcpTool", "FetchMcpResource", "ListMcpResources"]


def meta_mcps_part(tag: str) -> bytes:
    """An mcps blob that asks for the meta-tools: the flat definition (for routing) and the
    server's descriptor."""
    part = a.RequestContextMcpsPart.FromString(mcps_part(tag))
    options = part.mcp_meta_tool_options
    options.enabled = True
    d = options.mcp_descriptors.add(
        server_name="Knowledge", server_identifier=SERVER, server_use_instructions="Ask kb."
    )
    d.tools.add(
        tool_name=TOOL,
        description="Look something up.",
        input_schema_json='{"type": "object", "properties": {"q": {"type": "string"}}}',
    )
    return part.SerializeToString()


def meta_call_prompt(tag: str, q: str) -> str:
    args = {"server": SERVER, "toolName": TOOL, "arguments": {"q": q}}
    return f"[tool CallMcpTool {json.dumps(args)}] #{tag}"


@pytest.mark.parametrize("transport", ["h2", "shim"])
async def test_dual_then_ref_only_offers_the_meta_tools_on_every_turn(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    tag, cid = uuid.uuid4().hex[:8], str(uuid.uuid4())
    blobs = Blobs({**blobs_of(tag).data, "mcps": meta_mcps_part(tag)})
    client = Client(serve=blobs.by_id())
    first = turn_request(f"hello #{tag}", cid, blobs, dual=True)
    meta = a.RequestContextMcpsPart.FromString(blobs.data["mcps"]).mcp_meta_tool_options
    first.run_request.action.user_message_action.request_context.mcp_meta_tool_options.CopyFrom(
        meta
    )
    await play(server, transport, first, client)
    for q in ("retention", "backups"):
        turn = await play(
            server,
            transport,
            turn_request(meta_call_prompt(tag, q), cid, blobs, dual=False),
            client,
        )
        assert turn.asked == []  # the blobs were fetched on turn 1
        (args,) = turn.mcp_args
        assert (args.server_identifier, args.tool_name, args.provider_identifier) == (
            SERVER,
            TOOL,
            SERVER,
        )
        assert {k: v.string_value for k, v in args.args.items()} == {"q": q}
        assert turn.completed == ["mcp_tool_call"]
    bodies = conversation_bodies(upstream, tag)
    assert len(bodies) == 5
    for body in bodies:  # meta on every turn, never the flat tool itself
        names = tool_names(body)
        assert [n for n in names if n in META_TOOLS] == META_TOOLS and TOOL not in names
        assert SERVER in body["messages"][0]["content"]  # the servers listed in the prompt
    assert tool_results(bodies[4]) == [ANSWER, ANSWER]
    assert len({json.dumps((b["messages"][0], b.get("tools"))) for b in bodies}) == 1
