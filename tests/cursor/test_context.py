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
from cursor_byok.transport.cursor.mcp import McpDefinition, McpIndex
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


def test_real_dynamic_context_as_a_part_is_read_without_warnings() -> None:
    data = _capture_context("debug").SerializeToString()
    part = parts_.decode_request_context_part("rules", data)
    assert part.layout == "request_context"
    assert part.rules == () and part.mcp_tools == () and part.warnings == ()


def test_request_context_shaped_part_with_rules_skills_tools() -> None:
    rc = _capture_context("agent")
    rc.rules.add(full_path="/w/.cursor/rules/a.mdc", content="Use tabs.")
    rc.agent_skills.add(full_path="/w/.agents/skills/x/SKILL.md", description="Does X")
    rc.tools.append(_pb_tool("lookup", "kb", {"type": "object"}))
    rc.mcp_instructions.add(server_name="kb", instructions="Ask kb first.")
    part = parts_.decode_request_context_part("mcps", rc.SerializeToString())
    assert part.layout == "request_context"
    assert part.rules[0] == "Rule from /w/.cursor/rules/a.mdc:\nUse tabs."
    assert "Skill (/w/.agents/skills/x/SKILL.md): Does X" in part.rules[1]
    assert part.rules[2] == "Instructions from MCP server kb:\nAsk kb first."
    assert [t.name for t in part.mcp_tools] == ["lookup"]


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (numbers < 16, lengths < 2**14)."""
    length = len(payload)
    varint = bytes([length]) if length < 128 else bytes([(length & 0x7F) | 0x80, length >> 7])
    return bytes([(number << 3) | 2]) + varint + payload


def test_wrapper_layouts_are_found_by_shape() -> None:
    # A rules part as `{ repeated CursorRule = 1 }` (field numbers unknown [U]).
    rule = a.CursorRule(full_path="/r.mdc", content="Always test.").SerializeToString()
    part = parts_.decode_request_context_part("rules", _field(1, rule) + _field(1, rule))
    assert part.layout == "protobuf"
    assert part.rules == ("Rule from /r.mdc:\nAlways test.",) * 2
    # An MCP part grouped by server: { repeated Server = 1 { name = 1; repeated Tool = 2 } }.
    tool = _pb_tool("fetch_doc", "context7", {"type": "object"}).SerializeToString()
    server = _field(1, b"context7") + _field(2, tool)
    part = parts_.decode_request_context_part("mcps", _field(3, server))
    assert [t.tool_name for t in part.mcp_tools] == ["fetch_doc"]
    assert part.mcp_tools[0].provider_identifier == "context7"
    # A skills part.
    skill = a.AgentSkill(full_path="/s/SKILL.md", description="Review code").SerializeToString()
    part = parts_.decode_request_context_part("skills", _field(1, skill))
    assert part.rules and "Review code" in part.rules[0]
    # Subagents are recognised and reported as unused.
    sub = a.CustomSubagent(name="explore", prompt="p").SerializeToString()
    part = parts_.decode_request_context_part("subagents", _field(1, sub))
    assert part.rules == () and part.warnings


def test_json_and_text_parts() -> None:
    doc = {
        "rules": [{"fullPath": "/a.md", "content": "Be kind."}],
        "tools": [{"name": "q", "inputSchema": {"type": "object"}, "providerIdentifier": "s"}],
    }
    part = parts_.decode_request_context_part("mcps", json.dumps(doc).encode())
    assert part.layout == "json"
    assert part.rules == ("Rule from /a.md:\nBe kind.",)
    assert [t.name for t in part.mcp_tools] == ["q"]
    part = parts_.decode_request_context_part("rules", b"Plain rule text.\n")
    assert (part.layout, part.rules) == ("text", ("Plain rule text.",))
    assert parts_.decode_request_context_part("rules", b"").layout == "empty"


@pytest.mark.parametrize("seed", range(30))
def test_odd_bytes_never_raise(seed: int) -> None:
    data = os.urandom(1 + seed * 37) if seed else b"\xff\xfe\x00garbage"
    for kind in ("rules", "skills", "subagents", "mcps", "other"):
        part = parts_.decode_request_context_part(kind, data)
        assert isinstance(part, cx.ContextPart)
    part = parts_.decode_request_context_part("rules", b"\x0a\xff\xff\xff")
    assert part.layout == "unreadable" and part.warnings


# -- merge_context -------------------------------------------------------------------------------


def test_merge_context_orders_and_dedups() -> None:
    inline_pb = _capture_context("agent")
    inline_pb.rules.add(content="Inline rule.")
    inline_pb.tools.append(_pb_tool("inline_tool", "s1"))
    inline_pb.file_contents["b.py"] = "B"
    inline_pb.file_contents["a.py"] = "A"
    inline = cx.decode_request_context(inline_pb)
    parts = [
        cx.ContextPart(kind="rules", rules=("Part rule.", "Inline rule.")),
        cx.ContextPart(kind="mcps", mcp_tools=(_tool("part_tool", "s2"),)),
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
