"""MCP tools the client describes only by a definition file (`McpToolInfo.definition_path`, no
description or schema of its own): which files a turn's tools need, and the tools offered with
what the files said.

The rule (docs/loop.md "MCP definition files"): before a run's first model call the loop reads
every file its tools need that the run has not read yet (`ReadDefinitions`, one read exec per
file through the client, answered by one `DefinitionsRead`); what came back is kept in the
state per path for the rest of the run (`ConversationState.definitions`, reset by each run's
Start), bounded at MAX_DEFINITION_CHARS per file. A file that could not be read (or is too
large) leaves its tool offered with a note saying so.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .context import McpToolInfo, TurnContext

# A definition's description and schema (as JSON) together; a larger file is a failed read.
MAX_DEFINITION_CHARS = 64_000

_replace = msgspec.structs.replace


class DefinitionFile(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """What a read of definition file `path` gave: the tool's description and schema, or
    (`error` set) why it could not be read."""

    path: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)  # JSON Schema
    error: str = ""


def _needs_file(tool: McpToolInfo) -> bool:
    return bool(tool.definition_path) and not (
        tool.description.strip() and tool.parameters.get("properties")
    )


def needed(context: TurnContext, read: tuple[DefinitionFile, ...]) -> tuple[str, ...]:
    """The definition files `context`'s tools need that are not in `read`, sorted."""
    have = {f.path for f in read}
    paths = {
        t.definition_path
        for s in context.mcp_servers
        for t in s.tools
        if _needs_file(t) and t.definition_path not in have
    }
    return tuple(sorted(paths))


def bounded(file: DefinitionFile) -> DefinitionFile:
    """`file`, or a failed read when what it says is over MAX_DEFINITION_CHARS."""
    if file.error:
        return file
    size = len(file.description) + len(msgspec.json.encode(file.parameters))
    if size <= MAX_DEFINITION_CHARS:
        return file
    return DefinitionFile(
        path=file.path, error=f"the file is larger than {MAX_DEFINITION_CHARS} characters"
    )


def answered(
    paths: tuple[str, ...], files: tuple[DefinitionFile, ...]
) -> tuple[DefinitionFile, ...]:
    """The answer for each of `paths`, in order: the read of it in `files` (bounded), or a
    failed read when the answer named none."""
    by_path = {f.path: f for f in files}
    return tuple(
        bounded(by_path[p]) if p in by_path else DefinitionFile(path=p, error="no answer")
        for p in paths
    )


def note(path: str, error: str) -> str:
    """What a tool whose definition file failed says of it in the prompt."""
    return (
        f"(Its definition file {path} could not be read: {error}. Look the tool up with "
        "GetMcpTools or read that file before calling it.)"
    )


def _filled(tool: McpToolInfo, read: dict[str, DefinitionFile]) -> McpToolInfo:
    if not _needs_file(tool) or tool.definition_path not in read:
        return tool
    found = read[tool.definition_path]
    if found.error:
        said = note(found.path, found.error)
        if tool.description.endswith(said):  # filled before (a context filled again)
            return tool
        return _replace(tool, description=f"{tool.description.strip()} {said}".strip())
    return _replace(
        tool,
        description=tool.description.strip() or found.description,
        parameters=tool.parameters if tool.parameters.get("properties") else found.parameters,
    )


def filled(context: TurnContext, read: tuple[DefinitionFile, ...]) -> TurnContext:
    """`context` with each file-described tool's description and schema from `read` (the
    same object when nothing changes)."""
    if not read or not context.mcp_servers:
        return context
    by_path = {f.path: f for f in read}
    servers = tuple(
        _replace(s, tools=tuple(_filled(t, by_path) for t in s.tools)) for s in context.mcp_servers
    )
    if servers == context.mcp_servers:
        return context
    return _replace(context, mcp_servers=servers)
