"""The client's context for one run: `agent.v1.RequestContext` → native values → `TurnContext`.

Three sources feed a turn's context:

- an inline `RequestContext` (`UserMessageAction.request_context`,
  `RequestContextParts.dynamic_context`, `ResumeAction.request_context`, or the client's answer
  to `request_context_args`), decoded here into a `ClientContext`;
- the blobs referenced by `ConversationAction.request_context_parts` (rules, skills, subagents,
  MCP), decoded by context_parts.py into `ContextPart`s;
- `AgentRunRequest.mcp_tools`, decoded into `McpDefinition`s.

`merge_context` combines the native values into the loop's `TurnContext`, with the MCP tools
named for the model and routed back to their servers (mcp.py). Everything past decoding is
native: nothing here hands protobuf to the runtime.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]

from ...llm.canonical import sorted_value
from ...loop.catalogue import Switches
from ...loop.context import CustomAgent, DebugSession, Environment, Subagents, TurnContext
from .mcp import (
    McpDefinition,
    McpIndex,
    McpMeta,
    McpServerDescriptor,
    McpToolDescriptor,
    meta_servers,
)
from .proto import agent_pb2

__all__ = [
    "GIT_SUMMARY_LIMIT",
    "ClientContext",
    "ContextPart",
    "PartKind",
    "PartLayout",
    "decode_request_context",
    "environment_of",
    "git_summary",
    "mcp_definition",
    "mcp_meta_of",
    "merge_context",
    "schema_from_definition",
    "schema_of",
]

# A git status can list thousands of files; the system prompt gets a bounded summary.
GIT_SUMMARY_LIMIT = 4000
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ClientContext:
    """One `RequestContext`, decoded: what a turn's context can take from it."""

    rules: tuple[str, ...] = ()  # rules, non-file rules and MCP instructions, as text
    skills: tuple[str, ...] = ()  # one line per skill (its file, what it is for)
    tools: tuple[McpDefinition, ...] = ()
    environment: Environment | None = None
    git: str | None = None
    supplements: tuple[str, ...] = ()  # file contents the model should read with the message
    custom_subagents: int = 0  # how many custom subagents it named
    custom_agents: tuple[CustomAgent, ...] = ()  # those, as Task types (loop/custom_agents.py)
    # Tool gates (loop/catalogue.py Gate); None: the client did not say.
    web_search_enabled: bool | None = None  # RequestContext.web_search_enabled (17)
    web_fetch_enabled: bool | None = None  # RequestContext.web_fetch_enabled (24)
    read_lints_enabled: bool | None = None  # RequestContext.read_lints_enabled (35)
    mcp_meta: McpMeta | None = None  # RequestContext.mcp_meta_tool_options (34)
    debug: DebugSession | None = None  # RequestContext.debug_mode_config (15)


class PartKind(enum.StrEnum):
    """Which `request_context_parts` blob: the field that referenced it names its message."""

    RULES = "rules"  # rules_blob_id (1): RequestContextRulesPart
    SKILLS = "skills"  # skills_blob_id (3): RequestContextSkillsPart
    SUBAGENTS = "subagents"  # subagents_blob_id (5): RequestContextSubagentsPart
    MCPS = "mcps"  # mcps_blob_id (7): RequestContextMcpsPart


class PartLayout(enum.StrEnum):
    """How a part's bytes were read."""

    EMPTY = "empty"  # no bytes: nothing to read
    SCHEMA = "schema"  # parsed as its part message
    UNREADABLE = "unreadable"  # the bytes do not parse as that message (warnings say so)


@dataclass(frozen=True, slots=True)
class ContextPart:
    """What one `request_context_parts` blob contributes (context_parts.py)."""

    kind: PartKind
    rules: tuple[str, ...] = ()  # rules and MCP instructions, as text
    skills: tuple[str, ...] = ()  # one line per skill
    mcp_tools: tuple[McpDefinition, ...] = ()
    mcp_meta: McpMeta | None = None  # RequestContextMcpsPart.mcp_meta_tool_options (4)
    custom_subagents: int = 0  # how many the subagents part named
    custom_agents: tuple[CustomAgent, ...] = ()
    warnings: tuple[str, ...] = ()
    layout: PartLayout = PartLayout.EMPTY
    # The blob this part was read from, kept with the turn's context (KeptPart) so a later
    # turn can fall back to it; empty when it is not to be kept (too big, unreadable).
    blob_id: bytes = b""
    data: bytes = b""


# -- MCP tool definitions ---------------------------------------------------------------------


def _number(value: Any) -> Any:
    """protobuf Value numbers are doubles: give integral ones back as ints (1.0 → 1)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _number(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_number(v) for v in value]
    return value


def schema_of(value: Any | None, json_text: str | None) -> dict[str, Any]:
    """A tool's JSON Schema from its `input_schema_json` (if it parses) or its `input_schema`
    Value; anything that is not a JSON object becomes an empty object schema. Integral doubles
    become ints and every dict is key-sorted, so a reloaded request is byte-identical."""
    schema: Any = None
    if json_text:
        try:
            schema = json.loads(json_text)
        except ValueError:
            schema = None
    if not isinstance(schema, dict) and value is not None:
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


def schema_from_definition(definition: agent_pb2.McpToolDefinition) -> dict[str, Any]:
    return schema_of(
        definition.input_schema if definition.HasField("input_schema") else None,
        definition.input_schema_json if definition.HasField("input_schema_json") else None,
    )


def mcp_definition(definition: agent_pb2.McpToolDefinition) -> McpDefinition:
    return McpDefinition(
        name=definition.name,
        tool_name=definition.tool_name,
        provider_identifier=definition.provider_identifier,
        description=definition.description,
        parameters=schema_from_definition(definition),
    )


# -- rules, skills, instructions as text --------------------------------------------------------


def rule_text(rule: agent_pb2.CursorRule) -> str | None:
    content = rule.content.strip()
    if not content:
        return None
    return f"Rule from {rule.full_path}:\n{content}" if rule.full_path else content


def cloud_rule_text(text: str) -> str | None:
    """`cloud_rule` (RequestContext 16, RequestContextRulesPart 3): a rule the team set in
    Cursor's settings [U: only its name and type are known]. Given like any rule, labelled, so
    a wrong guess costs one line of prompt."""
    text = text.strip()
    return f"Rule from the team's settings:\n{text}" if text else None


def skill_text(skill: agent_pb2.AgentSkill) -> str | None:
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


def instructions_text(item: agent_pb2.McpInstructions) -> str | None:
    text = item.instructions.strip()
    if not text:
        return None
    server = item.server_name or item.server_identifier or "an MCP server"
    return f"Instructions from MCP server {server}:\n{text}"


def rules_of(rc: agent_pb2.RequestContext) -> list[str]:
    """The texts a RequestContext contributes to the system prompt, in a fixed order."""
    out: list[str] = []
    for r in (*rc.rules, *rc.non_file_rules):
        text = rule_text(r)
        if text:
            out.append(text)
    cloud = cloud_rule_text(rc.cloud_rule) if rc.HasField("cloud_rule") else None
    if cloud:
        out.append(cloud)
    for m in rc.mcp_instructions:
        text = instructions_text(m)
        if text:
            out.append(text)
    return out


# -- environment and git ----------------------------------------------------------------------


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
        terminals_folder=env.terminals_folder or None,
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


def skills_of(rc: agent_pb2.RequestContext) -> list[str]:
    """The skills a RequestContext offers, one line each, in its order (their own section of
    the system prompt, and their own category of the meter)."""
    return [text for text in (skill_text(s) for s in rc.agent_skills) if text]


def decode_request_context(rc: agent_pb2.RequestContext) -> ClientContext:
    return ClientContext(
        rules=tuple(rules_of(rc)),
        skills=tuple(skills_of(rc)),
        tools=tuple(mcp_definition(d) for d in rc.tools),
        environment=environment_of(rc.env) if rc.HasField("env") else None,
        git=git_summary(rc.git_repos),
        supplements=tuple(
            f"Contents of {path}:\n```\n{rc.file_contents[path]}\n```"
            for path in sorted(rc.file_contents)
        ),
        custom_subagents=len(rc.custom_subagents),
        custom_agents=custom_agents_of(rc.custom_subagents),
        web_search_enabled=rc.web_search_enabled if rc.HasField("web_search_enabled") else None,
        web_fetch_enabled=rc.web_fetch_enabled if rc.HasField("web_fetch_enabled") else None,
        read_lints_enabled=rc.read_lints_enabled if rc.HasField("read_lints_enabled") else None,
        mcp_meta=mcp_meta_of(rc.mcp_meta_tool_options)
        if rc.HasField("mcp_meta_tool_options")
        else None,
        debug=debug_session(rc.debug_mode_config) if rc.HasField("debug_mode_config") else None,
    )


# Bounds on the custom subagents a context may name, and on what each carries.
MAX_CUSTOM_AGENTS = 50
MAX_AGENT_NAME = 64
MAX_AGENT_DESCRIPTION = 1000
MAX_AGENT_PROMPT = 20_000
MAX_AGENT_TOOLS = 64
# Our own Task types: a custom agent of the same name is left out.
BUILT_IN_TYPES = frozenset({"generalpurpose", "explore", "shell", "inherit"})
_AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def custom_agents_of(defined: Iterable[agent_pb2.CustomSubagent]) -> tuple[CustomAgent, ...]:
    """The custom subagents a context names, bounded; a name that is not a plain identifier,
    repeats an earlier one or is one of our own types is left out."""
    out: dict[str, CustomAgent] = {}
    for cs in defined:
        name = cs.name.strip()
        if len(out) >= MAX_CUSTOM_AGENTS:
            break
        if (
            not name
            or len(name) > MAX_AGENT_NAME
            or not _AGENT_NAME.fullmatch(name)
            or name.casefold() in BUILT_IN_TYPES
            or name in out
        ):
            continue
        out[name] = CustomAgent(
            name=name,
            description=cs.description.strip()[:MAX_AGENT_DESCRIPTION],
            prompt=cs.prompt[:MAX_AGENT_PROMPT],
            model=cs.model.strip()[: MAX_AGENT_NAME * 2],
            tools=tuple(t.strip() for t in cs.tools[:MAX_AGENT_TOOLS] if t.strip()),
        )
    return tuple(out.values())


# Bound on each debug-mode field the prompt quotes (a path, a URL, an id).
MAX_DEBUG_FIELD = 1000


def debug_session(config: agent_pb2.DebugModeConfig) -> DebugSession | None:
    """The debug-mode session the IDE opened; None when it names neither a log nor an
    endpoint."""
    session = DebugSession(
        log_path=config.log_path[:MAX_DEBUG_FIELD],
        server_endpoint=config.server_endpoint[:MAX_DEBUG_FIELD],
        session_id=config.session_id[:MAX_DEBUG_FIELD],
    )
    return session if session.log_path or session.server_endpoint else None


def mcp_meta_of(options: agent_pb2.McpMetaToolOptions) -> McpMeta:
    """`McpMetaToolOptions` → native values (the servers in the client's order)."""
    servers: list[McpServerDescriptor] = []
    for d in options.mcp_descriptors:
        tools = tuple(
            McpToolDescriptor(
                tool_name=t.tool_name,
                description=t.description,
                parameters=schema_of(
                    t.input_schema if t.HasField("input_schema") else None,
                    t.input_schema_json if t.HasField("input_schema_json") else None,
                ),
                definition_path=t.definition_path,
            )
            for t in d.tools
        )
        servers.append(
            McpServerDescriptor(
                server_name=d.server_name,
                server_identifier=d.server_identifier,
                instructions=d.server_use_instructions,
                tools=tools,
                folder_path=d.folder_path,
            )
        )
    return McpMeta(enabled=options.enabled, servers=tuple(servers))


# -- merging ----------------------------------------------------------------------------------


def _custom_agents(
    parts: Sequence[ContextPart], inline: ClientContext | None
) -> tuple[CustomAgent, ...]:
    """The parts' custom agents, then the inline context's; the first of a name wins."""
    found: dict[str, CustomAgent] = {}
    for agent in (
        *(a for p in parts for a in p.custom_agents),
        *(inline.custom_agents if inline is not None else ()),
    ):
        found.setdefault(agent.name, agent)
    return tuple(found.values())[:MAX_CUSTOM_AGENTS]


def merge_context(
    inline: ClientContext | None,
    parts: Sequence[ContextPart],
    mcp_tools: Sequence[McpDefinition],
    *,
    mode: str,
    custom_instructions: str | None = None,
    suppress_subagent_progress_update_tool: bool | None = None,
    disabled_tools: tuple[str, ...] = (),
    enabled_tools: tuple[str, ...] = (),
    web_search_configured: bool = False,
    image_generation: bool = False,
) -> TurnContext:
    """One TurnContext from every context source. Rules keep a fixed order (parts in the order
    given, then the inline context's rules and MCP instructions; the skills the same way, in
    their own list) and duplicates are dropped, so the system prompt is the same for the same
    inputs. The tool gates come from
    the inline context's flags, the run request's and our config's (`disabled_tools`,
    `enabled_tools`, whether a web search backend and an image endpoint are configured).

    The MCP meta options come from the first part that has them (the mcps blob: the only
    source in ref_only mode), else from the inline context (field 34); with them on, the
    servers the meta-tools reach are kept in the context (mcp.meta_servers)."""
    rules: list[str] = []
    skills: list[str] = []
    definitions: list[McpDefinition] = []
    for part in parts:
        rules.extend(part.rules)
        skills.extend(part.skills)
        definitions.extend(part.mcp_tools)
    environment = Environment()
    git: str | None = None
    supplements: tuple[str, ...] = ()
    if inline is not None:
        rules.extend(inline.rules)
        skills.extend(inline.skills)
        definitions.extend(inline.tools)
        environment = inline.environment or environment
        git = inline.git
        supplements = inline.supplements
    definitions.extend(mcp_tools)
    index = McpIndex.build(definitions)
    meta = next((p.mcp_meta for p in parts if p.mcp_meta is not None), None)
    if meta is None and inline is not None:
        meta = inline.mcp_meta
    meta_on = meta is not None and meta.enabled
    return TurnContext(
        rules=tuple(dict.fromkeys(r for r in rules if r)),
        skills=tuple(dict.fromkeys(s for s in skills if s)),
        environment=environment,
        git=git,
        mcp_tools=index.definitions(),
        mcp_routes=index.routes(),
        mcp_servers=meta_servers(meta, index) if meta_on else (),
        supplements=supplements,
        custom_instructions=custom_instructions or None,
        mode=mode,
        debug=inline.debug if inline is not None else None,
        subagents=Subagents(custom=_custom_agents(parts, inline)),
        switches=Switches(
            web_search_enabled=inline.web_search_enabled if inline is not None else None,
            web_fetch_enabled=inline.web_fetch_enabled if inline is not None else None,
            read_lints_enabled=inline.read_lints_enabled if inline is not None else None,
            suppress_subagent_progress_update_tool=suppress_subagent_progress_update_tool,
            mcp_meta_tools=meta.enabled if meta is not None else None,
            disabled_tools=disabled_tools,
            enabled_tools=enabled_tools,
            web_search_configured=web_search_configured,
            image_generation=image_generation or None,
        ),
    )
