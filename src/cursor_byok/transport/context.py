"""The client's context for one run: RequestContext pieces → `TurnContext`, plus the MCP index.

Pure code (no I/O). Three sources feed a turn's context:

- an inline `agent.v1.RequestContext` (`UserMessageAction.request_context`,
  `RequestContextParts.dynamic_context`, `ResumeAction.request_context`, or the client's answer
  to `request_context_args`);
- the blobs referenced by `ConversationAction.request_context_parts` (rules, skills, subagents,
  MCP). Their inner schema is undocumented [U]: `decode_request_context_part` reads them
  defensively and never raises on odd bytes;
- `AgentRunRequest.mcp_tools`.

`merge_context` combines them into the loop's `TurnContext` and an `McpIndex` that maps the
model-facing MCP tool names back to what `mcp_args` needs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.unknown_fields import (  # type: ignore[import-untyped,unused-ignore]
    UnknownFieldSet,
)

from ..llm.canonical import sorted_value
from ..llm.types import ToolDefinition
from ..loop.context import Environment, TurnContext
from ..loop.tools import NATIVE_TOOL_NAMES
from .cursor.proto import agent_pb2

__all__ = [
    "GIT_SUMMARY_LIMIT",
    "ContextPart",
    "McpIndex",
    "McpTool",
    "decode_request_context_part",
    "environment_of",
    "git_summary",
    "mcp_tool_from_definition",
    "merge_context",
    "schema_from_definition",
]

# A git status can list thousands of files; the system prompt gets a bounded summary.
GIT_SUMMARY_LIMIT = 4000
# Bounds for what one context part may contribute (a hostile or broken blob stays harmless).
MAX_PART_ITEMS = 1000
MAX_WALK_DEPTH = 4

_NAME_OK = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NAME_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


# -- MCP tools --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class McpTool:
    """One MCP tool as the model sees it (`name`) and as `mcp_args` needs it."""

    name: str  # model-facing, unique, ^[a-zA-Z0-9_-]{1,64}$
    description: str
    parameters: dict[str, Any]  # JSON Schema, recursively key-sorted
    provider_identifier: str  # the MCP server's identifier (McpToolDefinition.provider_identifier)
    tool_name: str  # the tool's own name on its server (McpToolDefinition.tool_name or .name)
    definition_name: str  # McpToolDefinition.name as the client sent it (echoed in McpArgs.name)

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name, description=self.description, parameters=self.parameters
        )


def _number(value: Any) -> Any:
    """protobuf Value numbers are doubles: give integral ones back as ints (1.0 → 1)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _number(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_number(v) for v in value]
    return value


def schema_from_definition(definition: agent_pb2.McpToolDefinition) -> dict[str, Any]:
    """The tool's JSON Schema: `input_schema_json` if it parses, else the `input_schema` Value;
    anything that is not a JSON object becomes an empty object schema."""
    schema: Any = None
    if definition.HasField("input_schema_json") and definition.input_schema_json:
        try:
            schema = json.loads(definition.input_schema_json)
        except ValueError:
            schema = None
    if not isinstance(schema, dict) and definition.HasField("input_schema"):
        value = definition.input_schema
        kind = value.WhichOneof("kind")
        if kind == "struct_value":
            schema = json_format.MessageToDict(value.struct_value)
        elif kind == "string_value":  # a JSON document carried as a string
            try:
                schema = json.loads(value.string_value)
            except ValueError:
                schema = None
    if not isinstance(schema, dict):
        schema = dict(_EMPTY_SCHEMA)
    schema = _number(schema)
    if "type" not in schema:
        schema = {**schema, "type": "object"}
    return dict(sorted_value(schema))


def _sanitize_name(name: str) -> str:
    cleaned = _NAME_BAD_CHARS.sub("_", name).strip("_") or "tool"
    return cleaned[:64]


def mcp_tool_from_definition(definition: agent_pb2.McpToolDefinition, name: str) -> McpTool:
    return McpTool(
        name=name,
        description=definition.description,
        parameters=schema_from_definition(definition),
        provider_identifier=definition.provider_identifier,
        tool_name=definition.tool_name or definition.name,
        definition_name=definition.name or definition.tool_name,
    )


class McpIndex:
    """Model-facing name → McpTool, in a stable order (sorted by model-facing name).

    Naming: a tool keeps its own (sanitized) name when that is unique among the offered tools
    and is not a native tool name; otherwise it becomes `<server>__<tool>`, and a numeric suffix
    settles anything still equal. The same (server, tool) offered twice is listed once.
    """

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[McpTool] = ()) -> None:
        self._tools: dict[str, McpTool] = {t.name: t for t in sorted(tools, key=lambda t: t.name)}

    @classmethod
    def empty(cls) -> McpIndex:
        return cls()

    @classmethod
    def build(cls, definitions: Iterable[agent_pb2.McpToolDefinition]) -> McpIndex:
        unique: list[agent_pb2.McpToolDefinition] = []
        seen: set[tuple[str, str]] = set()
        for d in definitions:
            tool_name = d.tool_name or d.name
            if not tool_name:
                continue
            key = (d.provider_identifier, tool_name)
            if key in seen:
                continue
            seen.add(key)
            unique.append(d)
        base = [_sanitize_name(d.tool_name or d.name) for d in unique]
        counts: dict[str, int] = {}
        for b in base:
            counts[b] = counts.get(b, 0) + 1
        reserved = set(NATIVE_TOOL_NAMES)
        taken: set[str] = set()
        tools: list[McpTool] = []
        # Plain names first, so a prefixed name can never take a plain one's place.
        order = sorted(range(len(unique)), key=lambda i: (counts[base[i]] > 1, base[i], i))
        for i in order:
            d = unique[i]
            name = base[i]
            if counts[name] > 1 or name in reserved or name in taken:
                server = _sanitize_name(d.provider_identifier or "mcp")
                name = f"{server[:31]}__{name}"[:64]
            candidate, n = name, 2
            while candidate in taken or candidate in reserved:
                suffix = f"_{n}"
                candidate = name[: 64 - len(suffix)] + suffix
                n += 1
            taken.add(candidate)
            tools.append(mcp_tool_from_definition(d, candidate))
        return cls(tools)

    def names(self) -> frozenset[str]:
        return frozenset(self._tools)

    def get(self, name: str) -> McpTool | None:
        return self._tools.get(name)

    def __getitem__(self, name: str) -> McpTool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[McpTool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def definitions(self) -> tuple[ToolDefinition, ...]:
        return tuple(t.definition for t in self._tools.values())

    def __repr__(self) -> str:
        return f"McpIndex({sorted(self._tools)})"


# -- request_context_parts blobs ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContextPart:
    """What could be read from one `request_context_parts` blob."""

    kind: str  # "rules" | "skills" | "subagents" | "mcps" (or whatever the caller named it)
    rules: tuple[str, ...] = ()
    mcp_tools: tuple[agent_pb2.McpToolDefinition, ...] = ()
    warnings: tuple[str, ...] = ()
    # How the blob was read: "empty", "request_context", "protobuf", "json", "text", "unreadable".
    layout: str = "empty"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _wire_fields(data: bytes) -> list[tuple[int, int, bytes | int]] | None:
    """Top-level (field number, wire type, value) of a protobuf message, or None if `data` is
    not a well-formed message. Groups (wire types 3/4) count as malformed."""
    fields: list[tuple[int, int, bytes | int]] = []
    pos = 0
    try:
        while pos < len(data):
            key, pos = _varint(data, pos)
            number, wire = key >> 3, key & 7
            if number == 0:
                return None
            if wire == 0:
                value, pos = _varint(data, pos)
                fields.append((number, wire, value))
            elif wire == 1:
                if pos + 8 > len(data):
                    return None
                fields.append((number, wire, data[pos : pos + 8]))
                pos += 8
            elif wire == 2:
                length, pos = _varint(data, pos)
                if pos + length > len(data):
                    return None
                fields.append((number, wire, data[pos : pos + length]))
                pos += length
            elif wire == 5:
                if pos + 4 > len(data):
                    return None
                fields.append((number, wire, data[pos : pos + 4]))
                pos += 4
            else:
                return None
    except ValueError:
        return None
    return fields


def _looks_like_text(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\n\r\t" for c in text)


def _parse_clean(cls: type[Any], data: bytes) -> Any | None:
    """`data` parsed as `cls`, only if it parses and leaves no unknown field at the top."""
    try:
        msg = cls.FromString(data)
    except (DecodeError, ValueError, RuntimeError):
        return None
    if len(UnknownFieldSet(msg)) != 0:
        return None
    return msg


def _printable(*texts: str) -> bool:
    """Strings a human wrote (a message parsed from the wrong bytes has control characters)."""
    return all(c.isprintable() or c in "\n\r\t" for t in texts for c in t)


def _is_tool(msg: agent_pb2.McpToolDefinition) -> bool:
    has_tool_fields = (
        msg.HasField("input_schema") or bool(msg.provider_identifier) or bool(msg.tool_name)
    )
    return (
        bool(msg.name or msg.tool_name)
        and has_tool_fields
        and _printable(msg.name, msg.description, msg.provider_identifier, msg.tool_name)
    )


def _rule_text(rule: agent_pb2.CursorRule) -> str | None:
    content = rule.content.strip()
    if not content:
        return None
    return f"Rule from {rule.full_path}:\n{content}" if rule.full_path else content


def _skill_text(skill: agent_pb2.AgentSkill) -> str | None:
    if skill.disable_model_invocation:
        return None
    what = skill.description.strip()
    if not what and not skill.full_path:
        return None
    where = f" ({skill.full_path})" if skill.full_path else ""
    return (
        f"Skill{where}: {what or 'no description'}. Read the skill file for its full "
        "instructions when the task matches."
    )


def _instructions_text(item: agent_pb2.McpInstructions) -> str | None:
    text = item.instructions.strip()
    if not text:
        return None
    server = item.server_name or item.server_identifier or "an MCP server"
    return f"Instructions from MCP server {server}:\n{text}"


def _from_request_context(rc: agent_pb2.RequestContext) -> tuple[list[str], list[Any]]:
    rules: list[str] = []
    for r in (*rc.rules, *rc.non_file_rules):
        text = _rule_text(r)
        if text:
            rules.append(text)
    for s in rc.agent_skills:
        text = _skill_text(s)
        if text:
            rules.append(text)
    for m in rc.mcp_instructions:
        text = _instructions_text(m)
        if text:
            rules.append(text)
    return rules, list(rc.tools)


def _has_context(rc: agent_pb2.RequestContext) -> bool:
    return bool(
        rc.rules
        or rc.non_file_rules
        or rc.tools
        or rc.agent_skills
        or rc.mcp_instructions
        or rc.custom_subagents
    )


def _walk(kind: str, data: bytes, depth: int, rules: list[str], tools: list[Any]) -> int:
    """Find rule-, skill-, tool- and instruction-shaped messages anywhere in a message tree.
    Returns how many it recognised."""
    fields = _wire_fields(data)
    if fields is None:
        return 0
    found = 0
    for _number, wire, value in fields:
        if wire != 2 or not isinstance(value, bytes) or not value:
            continue
        if len(rules) + len(tools) >= MAX_PART_ITEMS:
            break
        if _looks_like_text(value):
            continue  # a string field, not a message
        if kind in ("mcps", "mcp"):
            tool = _parse_clean(agent_pb2.McpToolDefinition, value)
            if tool is not None and _is_tool(tool):
                tools.append(tool)
                found += 1
                continue
            instr = _parse_clean(agent_pb2.McpInstructions, value)
            if (
                instr is not None
                and instr.server_name
                and instr.instructions
                and _printable(instr.server_name, instr.instructions, instr.server_identifier)
            ):
                text = _instructions_text(instr)
                if text:
                    rules.append(text)
                found += 1
                continue
        elif kind in ("skills", "skill"):
            skill = _parse_clean(agent_pb2.AgentSkill, value)
            if (
                skill is not None
                and skill.full_path
                and (skill.description or skill.content)
                and _printable(skill.full_path, skill.description, skill.content)
            ):
                text = _skill_text(skill)
                if text:
                    rules.append(text)
                found += 1
                continue
        elif kind in ("rules", "rule"):
            rule = _parse_clean(agent_pb2.CursorRule, value)
            if rule is not None and rule.content and _printable(rule.full_path, rule.content):
                text = _rule_text(rule)
                if text:
                    rules.append(text)
                found += 1
                continue
        elif kind in ("subagents", "subagent"):
            sub = _parse_clean(agent_pb2.CustomSubagent, value)
            if sub is not None and sub.name and _printable(sub.name, sub.description):
                found += 1  # recognised; subagents are not offered by this server
                continue
        if depth < MAX_WALK_DEPTH:
            found += _walk(kind, value, depth + 1, rules, tools)
    return found


def _from_json(kind: str, doc: Any, rules: list[str], tools: list[Any]) -> None:
    items = doc if isinstance(doc, list) else [doc]
    for item in items[:MAX_PART_ITEMS]:
        if isinstance(item, str) and item.strip():
            rules.append(item.strip())
        elif isinstance(item, dict):
            schema = item.get("inputSchema", item.get("input_schema", item.get("parameters")))
            name = item.get("name") or item.get("toolName") or item.get("tool_name")
            if isinstance(name, str) and name and isinstance(schema, dict):
                d = agent_pb2.McpToolDefinition(
                    name=name,
                    description=str(item.get("description", "")),
                    provider_identifier=str(
                        item.get("providerIdentifier", item.get("provider_identifier", ""))
                    ),
                    tool_name=str(item.get("toolName", item.get("tool_name", name))),
                    input_schema_json=json.dumps(schema, sort_keys=True),
                )
                tools.append(d)
                continue
            for key in ("rules", "skills", "tools", "mcpTools", "mcp_tools", "items"):
                inner = item.get(key)
                if isinstance(inner, list):
                    _from_json(kind, inner, rules, tools)
            content = item.get("content")
            if isinstance(content, str) and content.strip():
                path = item.get("fullPath") or item.get("full_path") or item.get("path")
                text = content.strip()
                rules.append(f"Rule from {path}:\n{text}" if isinstance(path, str) else text)


def decode_request_context_part(kind: str, data: bytes) -> ContextPart:
    """Read one `request_context_parts` blob. The inner layout is undocumented [U], so this tries,
    in order: a `RequestContext`; any protobuf tree holding CursorRule / AgentSkill /
    McpToolDefinition / McpInstructions messages (by `kind`); JSON; plain UTF-8 text (rules
    only). It never raises: what it could not read is reported in `warnings`."""
    if not data:
        return ContextPart(kind=kind, layout="empty")
    warnings: list[str] = []
    rc = _parse_clean(agent_pb2.RequestContext, data)
    if rc is not None and _has_context(rc):
        rules, tools = _from_request_context(rc)
        if kind in ("subagents", "subagent") and rc.custom_subagents:
            warnings.append(
                f"{len(rc.custom_subagents)} custom subagent(s) ignored: this server runs no "
                "subagents"
            )
        return ContextPart(
            kind=kind,
            rules=tuple(rules),
            mcp_tools=tuple(tools),
            warnings=tuple(warnings),
            layout="request_context",
        )
    if not _looks_like_text(data):
        rules_found: list[str] = []
        tools_found: list[Any] = []
        if _walk(kind, data, 0, rules_found, tools_found) > 0:
            if kind in ("subagents", "subagent"):
                warnings.append("custom subagents ignored: this server runs no subagents")
            return ContextPart(
                kind=kind,
                rules=tuple(rules_found),
                mcp_tools=tuple(tools_found),
                warnings=tuple(warnings),
                layout="protobuf",
            )
        if rc is not None and rc.ListFields():
            # A RequestContext without rules or tools (environment, git, flags): nothing to add.
            return ContextPart(kind=kind, layout="request_context")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ContextPart(
            kind=kind,
            warnings=(f"the {kind} part ({len(data)} bytes) has a layout this server cannot read",),
            layout="unreadable",
        )
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if doc is not None and isinstance(doc, dict | list):
        rules_json: list[str] = []
        tools_json: list[Any] = []
        _from_json(kind, doc, rules_json, tools_json)
        if not rules_json and not tools_json:
            warnings.append(f"the {kind} part is JSON without recognisable rules or tools")
        return ContextPart(
            kind=kind,
            rules=tuple(rules_json),
            mcp_tools=tuple(tools_json),
            warnings=tuple(warnings),
            layout="json",
        )
    if kind in ("rules", "rule") and text.strip() and _looks_like_text(data):
        return ContextPart(kind=kind, rules=(text.strip(),), layout="text")
    return ContextPart(
        kind=kind,
        warnings=(f"the {kind} part ({len(data)} bytes) has a layout this server cannot read",),
        layout="unreadable",
    )


# -- merging ----------------------------------------------------------------------------------


def environment_of(env: agent_pb2.RequestContextEnv) -> Environment:
    cwd = env.process_working_directory if env.HasField("process_working_directory") else ""
    if not cwd and env.workspace_paths:
        cwd = env.workspace_paths[0]
    return Environment(
        os=env.os_version or None,
        shell=env.shell or None,
        workspace_paths=tuple(env.workspace_paths),
        cwd=cwd or None,
        time_zone=env.time_zone or None,
    )


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters of git status omitted]"


def git_summary(
    repos: Sequence[agent_pb2.GitRepoInfo], limit: int = GIT_SUMMARY_LIMIT
) -> str | None:
    parts: list[str] = []
    for repo in repos:
        head = f"Repository {repo.path or '(unknown path)'}"
        facts = []
        if repo.branch_name:
            facts.append(f"branch {repo.branch_name}")
        if repo.HasField("remote_url") and repo.remote_url:
            facts.append(f"remote {repo.remote_url}")
        if facts:
            head += " (" + ", ".join(facts) + ")"
        status = repo.status.strip()
        parts.append(f"{head}\nStatus:\n{status}" if status else head)
    if not parts:
        return None
    return _clip("\n\n".join(parts), limit)


def _file_supplements(rc: agent_pb2.RequestContext) -> list[str]:
    return [
        f"Contents of {path}:\n```\n{rc.file_contents[path]}\n```"
        for path in sorted(rc.file_contents)
    ]


def merge_context(
    inline: agent_pb2.RequestContext | None,
    parts: Sequence[ContextPart],
    mcp_tools: Sequence[agent_pb2.McpToolDefinition],
    *,
    mode: str,
) -> tuple[TurnContext, McpIndex]:
    """One TurnContext from every context source. Rules keep a fixed order (parts in the order
    given, then the inline context's rules, skills and MCP instructions) and duplicates are
    dropped, so the system prompt is the same for the same inputs."""
    rules: list[str] = []
    definitions: list[agent_pb2.McpToolDefinition] = []
    for part in parts:
        rules.extend(part.rules)
        definitions.extend(part.mcp_tools)
    environment = Environment()
    git: str | None = None
    supplements: list[str] = []
    if inline is not None:
        inline_rules, inline_tools = _from_request_context(inline)
        rules.extend(inline_rules)
        definitions.extend(inline_tools)
        if inline.HasField("env"):
            environment = environment_of(inline.env)
        git = git_summary(inline.git_repos)
        supplements.extend(_file_supplements(inline))
    definitions.extend(mcp_tools)
    index = McpIndex.build(definitions)
    unique_rules = tuple(dict.fromkeys(r for r in rules if r))
    context = TurnContext(
        rules=unique_rules,
        environment=environment,
        git=git,
        mcp_tools=index.definitions(),
        supplements=tuple(supplements),
        mode=mode,
    )
    return context, index
