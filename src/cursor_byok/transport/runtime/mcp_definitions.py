"""MCP tools the client describes only by a definition file: each file is read through the
client once per run (one round trip for all of them, before the turn's first model call), and
the tool is offered with the file's description and schema; a file that cannot be read leaves
the tool offered with a note saying so, logged once per file per process.

Which tools need a read is what the context says (a descriptor with a `definition_path` and no
description or schema of its own); the reads are input gathering, like the context blobs
(context.py), done before the loop's Start.
"""

from __future__ import annotations

import logging

import msgspec

from ...loop import TurnContext
from ...loop.context import McpToolInfo
from ..cursor.mcp_files import McpToolFile, parse_tool_file
from .requests import ClientRequests

log = logging.getLogger("cursor_byok.runtime")

# What a run read of each definition file: the tool's file, or why it could not be read.
Read = dict[str, McpToolFile | str]

_LOGGED: set[str] = set()  # definition files whose failed read this process has logged


def _needs_file(tool: McpToolInfo) -> bool:
    return bool(tool.definition_path) and not (
        tool.description.strip() and tool.parameters.get("properties")
    )


def wanted(context: TurnContext, read: Read) -> list[str]:
    """The definition files the context's tools need that this run has not read yet."""
    paths = {
        t.definition_path
        for s in context.mcp_servers
        for t in s.tools
        if _needs_file(t) and t.definition_path not in read
    }
    return sorted(paths)


async def read_definitions(context: TurnContext, requests: ClientRequests, read: Read) -> None:
    """Read the files `context` needs into `read` (each path once per run)."""
    paths = wanted(context, read)
    if not paths:
        return
    answers = await requests.definitions(paths)
    for path in paths:
        answer = answers[path]
        parsed: McpToolFile | str = (
            parse_tool_file(answer.text) if answer.text is not None else answer.error or "no answer"
        )
        read[path] = parsed
        if isinstance(parsed, str) and path not in _LOGGED:
            _LOGGED.add(path)
            log.warning("the MCP tool definition %s could not be read: %s", path, parsed)


def _filled(tool: McpToolInfo, read: Read) -> McpToolInfo:
    if not _needs_file(tool) or tool.definition_path not in read:
        return tool
    found = read[tool.definition_path]
    if isinstance(found, str):
        note = (
            f"(Its definition file {tool.definition_path} could not be read: {found}. Look "
            "the tool up with GetMcpTools or read that file before calling it.)"
        )
        about = f"{tool.description.strip()} {note}".strip()
        return msgspec.structs.replace(tool, description=about)
    return msgspec.structs.replace(
        tool,
        description=tool.description.strip() or found.description,
        parameters=tool.parameters if tool.parameters.get("properties") else found.parameters,
    )


def with_definitions(context: TurnContext, read: Read) -> TurnContext:
    """`context` with each file-described tool's description and schema from what was read."""
    if not read or not context.mcp_servers:
        return context
    servers = tuple(
        msgspec.structs.replace(s, tools=tuple(_filled(t, read) for t in s.tools))
        for s in context.mcp_servers
    )
    if servers == context.mcp_servers:
        return context
    return msgspec.structs.replace(context, mcp_servers=servers)


__all__ = ["Read", "read_definitions", "wanted", "with_definitions"]
