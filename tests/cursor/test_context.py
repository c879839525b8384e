"""Context: McpIndex naming, schema conversion, request_context_parts blobs, merge_context."""

from __future__ import annotations

import json
import os
import re

import msgspec
import pytest
from google.protobuf import json_format, struct_pb2

from cursor_byok.llm import canonical
from cursor_byok.loop.context import Environment, McpRoute
from cursor_byok.loop.tools import NATIVE_TOOL_NAMES
from cursor_byok.transport.cursor import context as cx
from cursor_byok.transport.cursor import context_parts as parts_
from cursor_byok.transport.cursor.mcp import (
    McpDefinition,
    McpIndex,
    McpMeta,
    McpServerDescriptor,
    McpToolDescriptor,
)
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.paths import CURSOR_FIXTURES

FIXTURES = CURSOR_FIXTURES
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _value(obj: object) -> struct_pb2.Value:
    v = struct_pb2.Value()
    json_format.ParseDict(obj, v)
    return v


def _pb_tool(name: str, server: str = "srv", schema: object | None = None) -> a.McpToolDefinition:
    d = a.McpToolDefinition(name=name, tool_name=name, provider_identifier=server, description="d")
    if schema is not None:
        d.input_schema.CopyFrom(_value(schema))
    return d


def _tool(name: str, server: str = "srv", schema: object | None = None) -> McpDefinition:
    return cx.mcp_definition(_pb_tool(name, server, schema))


# -- McpIndex ------------------------------------------------------------------------------------


def test_unique_tools_keep_their_names_sorted() -> None:
    index = McpIndex.build([_tool("zeta"), _tool("alpha", "other")])
    assert [t.name for t in index] == ["alpha", "zeta"]
    assert index.names() == frozenset({"alpha", "zeta"})
    assert index["alpha"].provider_identifier == "other"
    assert "zeta" in index and index.get("nope") is None


def test_colliding_names_get_server_prefix() -> None:
    index = McpIndex.build([_tool("search", "github"), _tool("search", "jira")])
    assert sorted(index.names()) == ["github__search", "jira__search"]
    tool = index["jira__search"]
    assert (tool.tool_name, tool.provider_identifier, tool.definition_name) == (
        "search",
        "jira",
        "search",
    )


def test_native_names_are_never_shadowed() -> None:
    index = McpIndex.build([_tool("Read", "fs")])
    assert index.names() == frozenset({"fs__Read"})
    assert not index.names() & set(NATIVE_TOOL_NAMES)


def test_names_are_sanitized_and_bounded() -> None:
    long = "x" * 80
    index = McpIndex.build(
        [_tool("get weather!", "s1"), _tool(long, "s2"), _tool("a.b", "weird server/1")]
    )
    for name in index.names():
        assert NAME_RE.match(name), name
    assert "get_weather" in index


def test_duplicate_definitions_listed_once_and_suffix_settles_leftovers() -> None:
    index = McpIndex.build([_tool("t", "s"), _tool("t", "s"), _tool("s__t", "x")])
    assert len(index) == 2
    # "s__t" from server x and "t" from server s don't collide: t stays plain.
    assert index.names() == frozenset({"t", "s__t"})


def test_empty_index() -> None:
    index = McpIndex.empty()
    assert len(index) == 0 and index.names() == frozenset()


# -- schemas -------------------------------------------------------------------------------------


def test_schema_from_value_is_sorted_with_integral_numbers() -> None:
    schema = {
        "type": "object",
        "required": ["city"],
        "properties": {"city": {"type": "string"}},
        "minProperties": 1,
    }
    d = _pb_tool("w", schema=schema)
    out = cx.schema_from_definition(d)
    assert out == schema
    assert isinstance(out["minProperties"], int)
    assert list(out) == sorted(out)
    # Byte stability: the stored (sorted) copy encodes exactly like the fresh one.
    tool = McpIndex.build([cx.mcp_definition(d)])["w"]
    encoded = msgspec.json.encode(tool.definition)
    again = msgspec.json.decode(encoded, type=type(tool.definition))
    assert msgspec.json.encode(again) == encoded
    assert canonical.sorted_value(out) == out


def test_schema_json_string_wins_and_bad_schema_is_empty_object() -> None:
    d = _pb_tool("w", schema={"type": "object"})
    d.input_schema_json = '{"type":"object","properties":{"q":{"type":"string"}}}'
    assert cx.schema_from_definition(d)["properties"] == {"q": {"type": "string"}}
    assert cx.schema_from_definition(_pb_tool("n")) == {"properties": {}, "type": "object"}
    assert cx.schema_from_definition(_pb_tool("l", schema=[1, 2])) == {
        "properties": {},
        "type": "object",
    }


# -- request_context_parts blobs -----------------------------------------------------------------


def _capture_context(name: str) -> a.RequestContext:
    record = json.loads((FIXTURES / f"ide-run-request-{name}.jsonl").read_text(encoding="utf-8"))
    msg = a.AgentClientMessage.FromString(bytes.fromhex(record["bidi_append_request"]["data"]))
    return msg.run_request.action.request_context_parts.dynamic_context


RULES, SKILLS, SUBAGENTS, MCPS = (
    cx.PartKind.RULES,
    cx.PartKind.SKILLS,
    cx.PartKind.SUBAGENTS,
    cx.PartKind.MCPS,
)


def _mcps_part() -> a.RequestContextMcpsPart:
    msg = a.RequestContextMcpsPart()
    msg.tools.append(_pb_tool("lookup", "kb", {"type": "object", "properties": {"q": {}}}))
    msg.mcp_instructions.add(server_name="kb", instructions="Ask kb first.", server_identifier="k")
    msg.mcp_file_system_options.enabled = True
    meta = msg.mcp_meta_tool_options
    meta.enabled = True
    server = meta.mcp_descriptors.add(
        server_name="Knowledge", server_identifier="kb", server_use_instructions="Use kb."
    )
    tool = server.tools.add(tool_name="lookup", description="Looks up", definition_path="/t.json")
    tool.input_schema.CopyFrom(_value({"type": "object", "required": ["q"]}))
    return msg


def test_part_messages_have_the_reference_field_numbers() -> None:
    """Reference §4: every field of the four part messages and of RequestContextParts."""

    def numbers(message: type) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    assert numbers(a.RequestContextRulesPart) == {
        "rules": 1,
        "non_file_rules": 2,
        "cloud_rule": 3,
    }
    assert numbers(a.RequestContextSkillsPart) == {"agent_skills": 1, "skill_options": 2}
    assert numbers(a.RequestContextSubagentsPart) == {"custom_subagents": 1}
    assert numbers(a.RequestContextMcpsPart) == {
        "tools": 1,
        "mcp_instructions": 2,
        "mcp_file_system_options": 3,
        "mcp_meta_tool_options": 4,
    }
    assert numbers(a.RequestContextParts) == {
        "rules_blob_id": 1,
        "rules_byte_length": 2,
        "skills_blob_id": 3,
        "skills_byte_length": 4,
        "subagents_blob_id": 5,
        "subagents_byte_length": 6,
        "mcps_blob_id": 7,
        "mcps_byte_length": 8,
        "dynamic_context": 9,
    }
    assert a.ConversationAction.DESCRIPTOR.fields_by_name["request_context_parts"].number == 17


def test_rules_part_by_its_schema() -> None:
    msg = a.RequestContextRulesPart(cloud_rule="  Team rule.  ")
    msg.rules.add(full_path="/w/.cursor/rules/a.mdc", content="Use tabs.")
    msg.non_file_rules.add(content="Answer in English.")
    msg.rules.add(full_path="/w/empty.mdc", content="   ")  # nothing to say: left out
    data = msg.SerializeToString()
    part = parts_.decode_request_context_part(RULES, data, b"id")
    assert part.layout == cx.PartLayout.SCHEMA and part.warnings == ()
    assert part.rules == (
        "Rule from /w/.cursor/rules/a.mdc:\nUse tabs.",
        "Answer in English.",
        "Rule from the team's settings:\nTeam rule.",
    )
    assert (part.blob_id, part.data) == (b"id", data)  # kept for later turns


def test_skills_and_subagents_parts_by_their_schema() -> None:
    msg = a.RequestContextSkillsPart()
    msg.agent_skills.add(full_path="/w/.agents/skills/x/SKILL.md", description="Does X")
    msg.agent_skills.add(full_path="/w/hidden/SKILL.md", disable_model_invocation=True)
    msg.skill_options.skill_descriptors.add(name="x", enabled=True)
    part = parts_.decode_request_context_part(SKILLS, msg.SerializeToString())
    assert part.rules == ()  # skills are their own section, not rules
    (skill,) = part.skills
    assert "Skill (/w/.agents/skills/x/SKILL.md): Does X" in skill
    sub = a.RequestContextSubagentsPart()
    sub.custom_subagents.add(name="explore", prompt="p", tools=["Read"], model="inherit")
    sub.custom_subagents.add(name="review")
    part = parts_.decode_request_context_part(SUBAGENTS, sub.SerializeToString())
    assert part.custom_subagents == 2 and part.rules == () and part.warnings == ()


def test_mcps_part_by_its_schema_with_meta_options() -> None:
    part = parts_.decode_request_context_part(MCPS, _mcps_part().SerializeToString())
    assert part.layout == cx.PartLayout.SCHEMA and part.warnings == ()
    assert part.rules == ("Instructions from MCP server kb:\nAsk kb first.",)
    assert [(t.name, t.provider_identifier) for t in part.mcp_tools] == [("lookup", "kb")]
    assert part.mcp_tools[0].parameters == {"properties": {"q": {}}, "type": "object"}
    assert part.mcp_meta == McpMeta(
        enabled=True,
        servers=(
            McpServerDescriptor(
                server_name="Knowledge",
                server_identifier="kb",
                instructions="Use kb.",
                tools=(
                    McpToolDescriptor(
                        tool_name="lookup",
                        description="Looks up",
                        parameters={"required": ["q"], "type": "object"},
                        definition_path="/t.json",
                    ),
                ),
            ),
        ),
    )


def test_empty_unreadable_and_oversized_parts() -> None:
    assert parts_.decode_request_context_part(RULES, b"").layout == cx.PartLayout.EMPTY
    part = parts_.decode_request_context_part(RULES, b"\x0a\xff\xff\xff", b"id")
    assert part.layout == cx.PartLayout.UNREADABLE
    assert part.warnings == (
        "the rules part (4 bytes) does not parse as RequestContextRulesPart; going on without it",
    )
    assert part.data == b""  # nothing worth keeping
    big = a.RequestContextRulesPart()
    big.rules.add(content="x" * (parts_.MAX_KEPT_BYTES + 1))
    part = parts_.decode_request_context_part(RULES, big.SerializeToString(), b"id")
    assert part.rules and part.data == b"" and part.blob_id == b""
    assert "more than the" in part.warnings[0]


def test_part_lists_are_bounded() -> None:
    msg = a.RequestContextMcpsPart()
    for i in range(parts_.MAX_PART_ITEMS + 5):
        msg.tools.append(_pb_tool(f"t{i}", "s"))
    part = parts_.decode_request_context_part(MCPS, msg.SerializeToString())
    assert len(part.mcp_tools) == parts_.MAX_PART_ITEMS
    assert part.warnings == (
        f"the mcps part lists {parts_.MAX_PART_ITEMS + 5} tools; only the first "
        f"{parts_.MAX_PART_ITEMS} are read",
    )


@pytest.mark.parametrize("seed", range(30))
def test_odd_bytes_never_raise(seed: int) -> None:
    data = os.urandom(1 + seed * 37) if seed else b"\xff\xfe\x00garbage"
    for kind in cx.PartKind:
        part = parts_.decode_request_context_part(kind, data)
        assert isinstance(part, cx.ContextPart)
        assert part.layout in (cx.PartLayout.SCHEMA, cx.PartLayout.UNREADABLE)


# -- merge_context -------------------------------------------------------------------------------


def test_merge_context_orders_and_dedups() -> None:
    inline_pb = _capture_context("agent")
    inline_pb.rules.add(content="Inline rule.")
    inline_pb.tools.append(_pb_tool("inline_tool", "s1"))
    inline_pb.file_contents["b.py"] = "B"
    inline_pb.file_contents["a.py"] = "A"
    inline = cx.decode_request_context(inline_pb)
    parts = [
        cx.ContextPart(kind=RULES, rules=("Part rule.", "Inline rule.")),
        cx.ContextPart(kind=MCPS, mcp_tools=(_tool("part_tool", "s2"),)),
    ]
    ctx = cx.merge_context(
        inline, parts, [_tool("req_tool", "s3")], mode="plan", custom_instructions="Be terse."
    )
    assert ctx.rules == ("Part rule.", "Inline rule.")
    assert [t.name for t in ctx.mcp_tools] == ["inline_tool", "part_tool", "req_tool"]
    assert ctx.mcp_routes == (
        McpRoute(name="inline_tool", server="s1", tool="inline_tool", definition="inline_tool"),
        McpRoute(name="part_tool", server="s2", tool="part_tool", definition="part_tool"),
        McpRoute(name="req_tool", server="s3", tool="req_tool", definition="req_tool"),
    )
    assert ctx.custom_instructions == "Be terse."
    assert ctx.supplements == ("Contents of a.py:\n```\nA\n```", "Contents of b.py:\n```\nB\n```")
    assert ctx.mode == "plan" and ctx.read_only


def test_merge_context_without_inline() -> None:
    ctx = cx.merge_context(None, [], [], mode="agent")
    assert ctx.environment == Environment()
    assert ctx.git is None and ctx.rules == () and ctx.mcp_tools == () and ctx.mcp_routes == ()
    assert ctx.custom_instructions is None


def test_git_summary_is_bounded() -> None:
    repo = a.GitRepoInfo(path="/w", branch_name="main", status="M x\n" * 5000)
    text = cx.git_summary([repo])
    assert text is not None
    assert text.startswith("Repository /w (branch main)\nStatus:\nM x")
    assert len(text) < cx.GIT_SUMMARY_LIMIT + 100
    assert "more characters of git status omitted" in text
    assert cx.git_summary([]) is None


def test_the_inline_cloud_rule_reads_like_the_rules_parts() -> None:
    """RequestContext.cloud_rule (16) and RequestContextRulesPart.cloud_rule (3) give the same
    text, so a dual request lists it once."""
    inline = cx.decode_request_context(a.RequestContext(cloud_rule=" Team rule. "))
    assert inline.rules == ("Rule from the team's settings:\nTeam rule.",)
    data = a.RequestContextRulesPart(cloud_rule="Team rule.").SerializeToString()
    part = parts_.decode_request_context_part(RULES, data)
    assert cx.merge_context(inline, [part], [], mode="agent").rules == inline.rules
    assert cx.decode_request_context(a.RequestContext(cloud_rule="  ")).rules == ()
