"""`request_context_parts` blobs → native `ContextPart`s, each by its own schema.

Newer IDE builds send the heavy parts of a run's context (rules, skills, subagents, MCP
servers) as blob ids (`ConversationAction.request_context_parts`); the server fetches the
blobs. A blob carries no type of its own: the field that referenced it says which message it
holds (reference §4: `rules_blob_id` → `RequestContextRulesPart`, `skills_blob_id` →
`RequestContextSkillsPart`, `subagents_blob_id` → `RequestContextSubagentsPart`,
`mcps_blob_id` → `RequestContextMcpsPart`).

Bytes that do not parse as their message (a broken or hostile client) never raise: the part
is empty and says why in its `warnings`. The captured IDE traffic needs nothing more lenient
(its blobs are referenced, never inlined), so no guessing by shape is done. Every repeated
field is read up to MAX_PART_ITEMS entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, assert_never

from google.protobuf.message import DecodeError  # type: ignore[import-untyped,unused-ignore]

from .context import (
    ContextPart,
    PartKind,
    PartLayout,
    cloud_rule_text,
    custom_agents_of,
    instructions_text,
    mcp_definition,
    mcp_meta_of,
    rule_text,
    skill_text,
)
from .proto import agent_pb2

__all__ = ["MAX_KEPT_BYTES", "MAX_PART_ITEMS", "decode_request_context_part"]

# Bounds for what one context part may contribute (a hostile or broken blob stays harmless).
MAX_PART_ITEMS = 1000
# A part's bytes up to this size are kept with the turn's context for a later turn whose
# client cannot serve the blob (the captured mcps blob: 28,434 bytes).
MAX_KEPT_BYTES = 512 * 1024

_MESSAGES: dict[PartKind, type[Any]] = {
    PartKind.RULES: agent_pb2.RequestContextRulesPart,
    PartKind.SKILLS: agent_pb2.RequestContextSkillsPart,
    PartKind.SUBAGENTS: agent_pb2.RequestContextSubagentsPart,
    PartKind.MCPS: agent_pb2.RequestContextMcpsPart,
}

_T = TypeVar("_T")


def _bounded(kind: PartKind, what: str, items: Sequence[_T], warnings: list[str]) -> Sequence[_T]:
    if len(items) > MAX_PART_ITEMS:
        warnings.append(
            f"the {kind} part lists {len(items)} {what}; only the first {MAX_PART_ITEMS} are read"
        )
        return items[:MAX_PART_ITEMS]
    return items


def _texts(texts: Sequence[str | None]) -> tuple[str, ...]:
    return tuple(t for t in texts if t)


def _rules(msg: agent_pb2.RequestContextRulesPart, warnings: list[str]) -> ContextPart:
    texts = [rule_text(r) for r in _bounded(PartKind.RULES, "rules", msg.rules, warnings)]
    texts += [
        rule_text(r)
        for r in _bounded(PartKind.RULES, "non-file rules", msg.non_file_rules, warnings)
    ]
    if msg.HasField("cloud_rule"):
        texts.append(cloud_rule_text(msg.cloud_rule))
    return ContextPart(kind=PartKind.RULES, rules=_texts(texts))


def _skills(msg: agent_pb2.RequestContextSkillsPart, warnings: list[str]) -> ContextPart:
    # skill_options lists the skills' descriptors for the IDE's settings; what the model
    # needs (path, description) is in agent_skills.
    skills = _bounded(PartKind.SKILLS, "skills", msg.agent_skills, warnings)
    return ContextPart(kind=PartKind.SKILLS, skills=_texts([skill_text(s) for s in skills]))


def _subagents(msg: agent_pb2.RequestContextSubagentsPart) -> ContextPart:
    return ContextPart(
        kind=PartKind.SUBAGENTS,
        custom_subagents=len(msg.custom_subagents),
        custom_agents=custom_agents_of(msg.custom_subagents),
    )


def _mcps(msg: agent_pb2.RequestContextMcpsPart, warnings: list[str]) -> ContextPart:
    tools = _bounded(PartKind.MCPS, "tools", msg.tools, warnings)
    instructions = _bounded(PartKind.MCPS, "instructions", msg.mcp_instructions, warnings)
    meta = None
    if msg.HasField("mcp_meta_tool_options"):
        options = msg.mcp_meta_tool_options
        if len(options.mcp_descriptors) > MAX_PART_ITEMS:
            warnings.append(
                f"the mcps part describes {len(options.mcp_descriptors)} servers; only the "
                f"first {MAX_PART_ITEMS} are read"
            )
            del options.mcp_descriptors[MAX_PART_ITEMS:]
        meta = mcp_meta_of(options)
    # mcp_file_system_options (3) is decoded but not used: it tells the IDE where MCP tool
    # files live for its own file-based MCP mode, which this server does not offer.
    return ContextPart(
        kind=PartKind.MCPS,
        rules=_texts([instructions_text(i) for i in instructions]),
        mcp_tools=tuple(mcp_definition(d) for d in tools),
        mcp_meta=meta,
    )


def decode_request_context_part(kind: PartKind, data: bytes, blob_id: bytes = b"") -> ContextPart:
    """Read one `request_context_parts` blob as the message its `kind` names. Never raises:
    bytes that do not parse give an empty part with a warning. A readable blob of at most
    MAX_KEPT_BYTES comes back with its bytes (`data`, `blob_id`) to be kept."""
    if not data:
        return ContextPart(kind=kind, layout=PartLayout.EMPTY)
    message = _MESSAGES[kind]
    try:
        msg = message.FromString(data)
    except (DecodeError, ValueError, RuntimeError):
        return ContextPart(
            kind=kind,
            warnings=(
                f"the {kind} part ({len(data)} bytes) does not parse as {message.__name__}; "
                "going on without it",
            ),
            layout=PartLayout.UNREADABLE,
        )
    warnings: list[str] = []
    match kind:
        case PartKind.RULES:
            part = _rules(msg, warnings)
        case PartKind.SKILLS:
            part = _skills(msg, warnings)
        case PartKind.SUBAGENTS:
            part = _subagents(msg)
        case PartKind.MCPS:
            part = _mcps(msg, warnings)
        case _:
            assert_never(kind)
    keep = len(data) <= MAX_KEPT_BYTES
    if not keep:
        warnings.append(
            f"the {kind} part has {len(data)} bytes, more than the {MAX_KEPT_BYTES} kept for "
            "later turns; a later turn whose client cannot serve it goes on without it"
        )
    return ContextPart(
        kind=kind,
        rules=part.rules,
        skills=part.skills,
        mcp_tools=part.mcp_tools,
        mcp_meta=part.mcp_meta,
        custom_subagents=part.custom_subagents,
        custom_agents=part.custom_agents,
        warnings=tuple(warnings),
        layout=PartLayout.SCHEMA,
        blob_id=blob_id if keep else b"",
        data=data if keep else b"",
    )
