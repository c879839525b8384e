"""MCP tools the client describes only by a definition file (`McpToolDescriptor.definition_path`,
the file-based descriptors of the meta-tools): the read exec that fetches one, and the file read
as the tool's description and argument schema.

[U] The file's shape: JSON with `description` and the schema under `inputSchema` (MCP's own
name), `input_schema`, `parameters` or `arguments`; a file that is not such JSON is a failed
read (the tool is offered with a note). Bounded: at most MAX_DEFINITION_CHARS are read (the
loop's bound on what it keeps, loop/definitions.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...llm import canonical
from ...loop import MAX_DEFINITION_CHARS, DefinitionFile
from .proto import agent_pb2

_SCHEMA_KEYS = ("inputSchema", "input_schema", "parameters", "arguments")


@dataclass(frozen=True, slots=True)
class McpToolFile:
    """What a definition file says of its tool."""

    description: str
    parameters: dict[str, Any]


def read_exec(exec_id: int, path: str) -> bytes:
    """exec `read_args` for a definition file (no tool call of the model's: no card)."""
    args = agent_pb2.ReadArgs(path=path, tool_call_id=f"mcp-definition-{exec_id}")
    args.limit = 2000  # lines; the size bound below applies too
    return bytes(
        agent_pb2.AgentServerMessage(
            exec_server_message=agent_pb2.ExecServerMessage(id=exec_id, read_args=args)
        ).SerializeToString()
    )


def read_text(message: agent_pb2.ExecClientMessage) -> tuple[str | None, str]:
    """(the file's text, "") or (None, why it could not be read) from the exec's answer."""
    if message.WhichOneof("message") != "read_result":
        return None, "the client answered with something else than a read result"
    result = message.read_result
    kind = result.WhichOneof("result")
    if kind != "success":
        return None, f"the client answered {kind or 'nothing'}"
    success = result.success
    if success.WhichOneof("output") != "content":
        return None, "the file is not text"
    text = success.content
    if len(text) > MAX_DEFINITION_CHARS or success.truncated:
        return None, f"the file is larger than {MAX_DEFINITION_CHARS} characters"
    return text, ""


def parse_tool_file(text: str) -> McpToolFile | str:
    """The tool's description and schema, or why the text is not a definition."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return f"it is not JSON ({exc})"
    if not isinstance(data, dict):
        return "it is not a JSON object"
    description = data.get("description")
    schema: Any = next((data[k] for k in _SCHEMA_KEYS if isinstance(data.get(k), dict)), None)
    if not isinstance(description, str) and schema is None:
        return "it names neither a description nor an input schema"
    return McpToolFile(
        description=description.strip() if isinstance(description, str) else "",
        parameters=canonical.sorted_value(schema) if schema is not None else {"type": "object"},
    )


def definition_file(path: str, text: str | None, error: str) -> DefinitionFile:
    """The loop's value for the read of `path`: what the file says, or why it failed."""
    if text is None:
        return DefinitionFile(path=path, error=error or "no answer")
    parsed = parse_tool_file(text)
    if isinstance(parsed, str):
        return DefinitionFile(path=path, error=parsed)
    return DefinitionFile(path=path, description=parsed.description, parameters=parsed.parameters)
