"""`request_context_parts` blobs → native `ContextPart`s.

Newer IDE builds send the heavy parts of a run's context (rules, skills, subagents, MCP
servers) as blob ids (`ConversationAction.request_context_parts`); the server fetches the
blobs. Their inner schema was never captured [U], so `decode_request_context_part` reads them
defensively and never raises on odd bytes: a `RequestContext`, then any protobuf tree holding
rule-, skill-, tool- and instruction-shaped messages, then JSON, then plain text. What it could
not read is reported in the part's `warnings`.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.message import DecodeError  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.unknown_fields import (  # type: ignore[import-untyped,unused-ignore]
    UnknownFieldSet,
)

from .context import (
    ContextPart,
    decode_request_context,
    instructions_text,
    mcp_definition,
    rule_text,
    skill_text,
)
from .mcp import McpDefinition
from .proto import agent_pb2

__all__ = ["MAX_PART_ITEMS", "decode_request_context_part"]

# Bounds for what one context part may contribute (a hostile or broken blob stays harmless).
MAX_PART_ITEMS = 1000
MAX_WALK_DEPTH = 4


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


def _has_context(rc: agent_pb2.RequestContext) -> bool:
    return bool(
        rc.rules
        or rc.non_file_rules
        or rc.tools
        or rc.agent_skills
        or rc.mcp_instructions
        or rc.custom_subagents
    )


def _walk(kind: str, data: bytes, depth: int, rules: list[str], tools: list[McpDefinition]) -> int:
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
                tools.append(mcp_definition(tool))
                found += 1
                continue
            instr = _parse_clean(agent_pb2.McpInstructions, value)
            if (
                instr is not None
                and instr.server_name
                and instr.instructions
                and _printable(instr.server_name, instr.instructions, instr.server_identifier)
            ):
                text = instructions_text(instr)
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
                text = skill_text(skill)
                if text:
                    rules.append(text)
                found += 1
                continue
        elif kind in ("rules", "rule"):
            rule = _parse_clean(agent_pb2.CursorRule, value)
            if rule is not None and rule.content and _printable(rule.full_path, rule.content):
                text = rule_text(rule)
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


def _from_json(kind: str, doc: Any, rules: list[str], tools: list[McpDefinition]) -> None:
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
                tools.append(mcp_definition(d))
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
        decoded = decode_request_context(rc)
        if kind in ("subagents", "subagent") and decoded.custom_subagents:
            warnings.append(
                f"{decoded.custom_subagents} custom subagent(s) ignored: this server runs no "
                "subagents"
            )
        return ContextPart(
            kind=kind,
            rules=decoded.rules,
            mcp_tools=decoded.tools,
            warnings=tuple(warnings),
            layout="request_context",
        )
    if not _looks_like_text(data):
        rules_found: list[str] = []
        tools_found: list[McpDefinition] = []
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
        tools_json: list[McpDefinition] = []
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
