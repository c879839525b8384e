"""MCP tools as the client offers them and as the model sees them: native values only.

The client describes each MCP tool by its server (`provider_identifier`), its own name on that
server and a JSON Schema; the model needs one unique, provider-safe name per tool. `McpIndex`
settles the names and maps each model-facing name back to what `mcp_args` needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ...llm.types import ToolDefinition
from ...loop.context import McpRoute, McpServerInfo, McpToolInfo, TurnContext
from ...loop.tools import NATIVE_TOOL_NAMES

_NAME_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True, slots=True)
class McpDefinition:
    """One MCP tool exactly as the client defined it (decoded from `McpToolDefinition`)."""

    name: str  # the client's own name for the tool (echoed in McpArgs.name)
    tool_name: str  # the tool's name on its server ("" when the client sent only `name`)
    provider_identifier: str  # the MCP server's identifier
    description: str
    parameters: dict[str, Any]  # JSON Schema, recursively key-sorted


@dataclass(frozen=True, slots=True)
class McpToolDescriptor:
    """One tool of an MCP server as `McpMetaToolOptions` describes it (reference §4)."""

    tool_name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema, recursively key-sorted (context.schema_of)
    definition_path: str = ""


@dataclass(frozen=True, slots=True)
class McpServerDescriptor:
    """One MCP server of `McpMetaToolOptions.mcp_descriptors` (`McpDescriptor`)."""

    server_name: str
    server_identifier: str
    instructions: str = ""  # server_use_instructions
    tools: tuple[McpToolDescriptor, ...] = ()
    folder_path: str = ""


@dataclass(frozen=True, slots=True)
class McpMeta:
    """`McpMetaToolOptions`: whether the client wants MCP offered through the meta-tools
    (GetMcpTools, CallMcpTool, ...) and the servers it described for them."""

    enabled: bool
    servers: tuple[McpServerDescriptor, ...] = ()


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

    @property
    def route(self) -> McpRoute:
        return McpRoute(
            name=self.name,
            server=self.provider_identifier,
            tool=self.tool_name,
            definition=self.definition_name,
        )

    @classmethod
    def of_route(cls, route: McpRoute) -> McpTool:
        """The parts of a tool a call needs, from the route the loop keeps with its context."""
        return cls(
            name=route.name,
            description="",
            parameters={},
            provider_identifier=route.server,
            tool_name=route.tool,
            definition_name=route.definition,
        )


def _sanitize_name(name: str) -> str:
    cleaned = _NAME_BAD_CHARS.sub("_", name).strip("_") or "tool"
    return cleaned[:64]


def _tool(definition: McpDefinition, name: str) -> McpTool:
    return McpTool(
        name=name,
        description=definition.description,
        parameters=definition.parameters,
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
    def build(cls, definitions: Iterable[McpDefinition]) -> McpIndex:
        unique: list[McpDefinition] = []
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
            tools.append(_tool(d, candidate))
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

    def routes(self) -> tuple[McpRoute, ...]:
        return tuple(t.route for t in self._tools.values())

    def __repr__(self) -> str:
        return f"McpIndex({sorted(self._tools)})"


def meta_servers(meta: McpMeta | None, index: McpIndex) -> tuple[McpServerInfo, ...]:
    """The servers the meta-tools reach: the client's descriptors, completed by its flat
    definitions (a tool or a server only the flat list names is added; a descriptor's missing
    description or schema is taken from the flat definition of the same tool).

    Sorted by server identifier, each server's tools by name, so the same inputs give the same
    system prompt whatever order the client sent them in (prompt cache). A descriptor without
    an identifier goes by its name; one with neither is left out."""
    servers: dict[str, tuple[str, str]] = {}  # identifier → (name, instructions)
    tools: dict[str, dict[str, McpToolInfo]] = {}
    for d in meta.servers if meta is not None else ():
        identifier = d.server_identifier or d.server_name
        if not identifier:
            continue
        servers.setdefault(identifier, (d.server_name, d.instructions))
        known = tools.setdefault(identifier, {})
        for t in d.tools:
            if t.tool_name and t.tool_name not in known:
                known[t.tool_name] = McpToolInfo(
                    name=t.tool_name,
                    description=t.description,
                    parameters=t.parameters,
                    definition_path=t.definition_path,
                )
    for flat in index:
        identifier = flat.provider_identifier
        if not identifier or not flat.tool_name:
            continue
        servers.setdefault(identifier, ("", ""))
        known = tools.setdefault(identifier, {})
        had = known.get(flat.tool_name)
        if had is None:
            known[flat.tool_name] = McpToolInfo(
                name=flat.tool_name, description=flat.description, parameters=flat.parameters
            )
        elif not had.description or not had.parameters.get("properties"):
            known[flat.tool_name] = McpToolInfo(
                name=had.name,
                description=had.description or flat.description,
                parameters=had.parameters if had.parameters.get("properties") else flat.parameters,
                definition_path=had.definition_path,
            )
    return tuple(
        McpServerInfo(
            identifier=identifier,
            name=name,
            instructions=instructions,
            tools=tuple(tools[identifier][k] for k in sorted(tools[identifier])),
        )
        for identifier, (name, instructions) in sorted(servers.items())
    )


@dataclass(frozen=True, slots=True)
class McpDirectory:
    """What the MCP meta-tools of one call can reach: the turn's servers (for GetMcpTools and
    to check a CallMcpTool's server and tool) and the flat tools' routes (to fill `McpArgs`
    as the client defined the tool)."""

    servers: tuple[McpServerInfo, ...] = ()
    routes: tuple[McpRoute, ...] = ()

    @classmethod
    def of(cls, context: TurnContext | None) -> McpDirectory:
        if context is None:
            return cls()
        return cls(servers=context.mcp_servers, routes=context.mcp_routes)

    def server(self, key: str) -> McpServerInfo | None:
        """The server whose identifier is `key`, else the one whose name is (the model may
        name a server by the name it read)."""
        for s in self.servers:
            if s.identifier == key:
                return s
        return next((s for s in self.servers if s.name and s.name == key), None)

    def route(self, server: str, tool: str) -> McpRoute | None:
        """The flat definition's route of `tool` on the server with identifier `server`."""
        return next((r for r in self.routes if r.server == server and r.tool == tool), None)

    def server_identifiers(self) -> tuple[str, ...]:
        ids = {s.identifier for s in self.servers} | {r.server for r in self.routes if r.server}
        return tuple(sorted(ids))
