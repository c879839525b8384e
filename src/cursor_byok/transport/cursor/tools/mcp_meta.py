"""The MCP meta-tools (reference §2.18): MCP offered through four fixed tools instead of one tool
per MCP tool, when the client's `McpMetaToolOptions.enabled` says so.

- GetMcpTools: answered by the server from the turn's servers (`ToolSettings.mcp`: the client's
  descriptors completed by its flat definitions); nothing goes to the client. We do not send
  `mcp_state_exec_args` first ([S] in the reference; a client that does not know it would cost
  the call a deadline), so the result cannot say whether a server is up.
- CallMcpTool: `mcp_args` with `server_identifier`, the name and provider identifier of the flat
  definition of (server, toolName); a server or tool the turn does not know is an error result
  naming what exists, and nothing is sent. Results as for a flat MCP tool (mcp.py).
- FetchMcpResource: `read_mcp_resource_exec_args` → `read_mcp_resource_exec_result`.
- ListMcpResources: `list_mcp_resources_exec_args` → `list_mcp_resources_exec_result`.

`requestSmartModeApproval` with its `smartModeBlockReason` (the model's retry after Auto-review
blocked a call) goes out as `McpArgs.smart_mode_approval` (6) `{request_id: the call id, reason}`,
as for Shell; the flag without a reason is not sent (leaving it out is the ordinary path).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, ClassVar

from ....llm.types import ImageContent
from ....loop.context import McpServerInfo, McpToolInfo
from ..mcp import McpTool
from ..proto import agent_pb2
from . import args as a
from . import cards
from .format import clip_middle
from .images import MAX_IMAGE_BYTES, sniff_image
from .machine import Finished, Handlers, Phase, Step, ToolMachine
from .mcp import McpMachine

__all__ = [
    "CallMcpToolMachine",
    "FetchMcpResourceMachine",
    "GetMcpToolsMachine",
    "ListMcpResourcesMachine",
]

# GetMcpTools' pattern: a longer one is refused (the reference's bound for RE2 patterns).
MAX_PATTERN_CHARS = 256


def _names(items: list[str]) -> str:
    return ", ".join(items) if items else "none"


def _server_label(server: McpServerInfo) -> str:
    if server.name and server.name != server.identifier:
        return f"{server.identifier} ({server.name})"
    return server.identifier


# -- GetMcpTools ------------------------------------------------------------------------------


def _describe_tool(tool: McpToolInfo) -> str:
    schema = json.dumps(tool.parameters or {"type": "object"}, sort_keys=True)
    description = tool.description.strip() or "(no description)"
    return f"- {tool.name}: {description}\n  Input schema: {schema}"


class GetMcpToolsMachine(ToolMachine):
    """Answered at once from the turn's MCP servers: no exec, the card carries the text."""

    CARD = "get_mcp_tools_tool_call"

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        args = tc.get_mcp_tools_tool_call.args
        args.tool_call_id = self.tool_call_id
        for key, field in (("server", "server"), ("toolName", "tool_name"), ("pattern", "pattern")):
            value = a.get_str(self.args, key)
            if value:
                setattr(args, field, value)
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.get_mcp_tools_tool_call.result.error.error = text

    def _answer_now(self, now_ms: int) -> Finished:
        text, ok = self._answer()
        if not ok:
            return self._finish_error(text, now_ms)
        tc = self._card()
        tc.get_mcp_tools_tool_call.result.success.content = text
        return self._finish(text, tc, now_ms)

    def _answer(self) -> tuple[str, bool]:
        directory = self.settings.mcp
        server_key = a.get_str(self.args, "server") or ""
        tool_name = a.get_str(self.args, "toolName") or ""
        pattern_text = a.get_str(self.args, "pattern") or ""
        servers = directory.servers
        if not servers:
            return "Error: no MCP servers are available in this conversation.", False
        if server_key:
            server = directory.server(server_key)
            if server is None:
                known = _names([_server_label(s) for s in servers])
                return f"Error: there is no MCP server {server_key!r}. Servers: {known}.", False
            servers = (server,)
        pattern: re.Pattern[str] | None = None
        if pattern_text:
            if len(pattern_text) > MAX_PATTERN_CHARS:
                return f"Error: pattern is longer than {MAX_PATTERN_CHARS} characters.", False
            try:
                pattern = re.compile(pattern_text)
            except re.error as exc:
                return f"Error: pattern is not a valid regular expression ({exc}).", False
        sections: list[str] = []
        for server in servers:
            tools = [
                t
                for t in server.tools
                if (not tool_name or t.name == tool_name)
                and (
                    pattern is None
                    or pattern.search(t.name)
                    or pattern.search(server.identifier)
                    or (server.name and pattern.search(server.name))
                )
            ]
            if not tools:
                continue
            body = "\n".join(_describe_tool(t) for t in tools)
            sections.append(f"MCP server {_server_label(server)}:\n{body}")
        if not sections:
            asked = " and ".join(
                x
                for x in (
                    f"server {server_key!r}" if server_key else "",
                    f"tool {tool_name!r}" if tool_name else "",
                    f"pattern {pattern_text!r}" if pattern_text else "",
                )
                if x
            )
            if tool_name and server_key:
                known = _names([t.name for t in servers[0].tools])
                return f"Error: no MCP tool matches {asked}. Its tools: {known}.", False
            known = _names([_server_label(s) for s in directory.servers])
            return f"No MCP tool matches {asked}. Servers: {known}.", True
        return clip_middle("\n\n".join(sections)), True

    HANDLERS: ClassVar[Handlers] = {}


# -- CallMcpTool ------------------------------------------------------------------------------


class CallMcpToolMachine(McpMachine):
    """CallMcpTool → the `mcp_args` exec of the tool it names; the rest is a flat MCP call."""

    REQUIRED = ("server", "toolName")

    @classmethod
    def placeholder(cls, name: str, tool_call_id: str) -> agent_pb2.ToolCall:
        return cards.placeholder(cls.CARD, tool_call_id)

    def _label(self) -> str:
        tool = a.get_str(self.args, "toolName") or "?"
        server = a.get_str(self.args, "server") or "?"
        return f"{tool} on MCP server {server}"

    def _tool_arguments(self) -> dict[str, Any]:
        value = self.args.get("arguments")
        if isinstance(value, str) and value.strip():
            try:
                value = json.loads(value)  # some models send the object as a JSON string
            except ValueError:
                return {}
        return dict(value) if isinstance(value, dict) else {}

    def _build_args(self) -> agent_pb2.McpArgs | None:
        if a.missing_strings(self.args, self.REQUIRED):
            return None  # `_argument_problem` names what is missing
        problem, tool, identifier = self._resolve()
        if problem is not None:
            self._args_problem = problem
            return None
        self.tool = tool
        ma = super()._build_args()
        if ma is not None:
            ma.server_identifier = identifier
            reason = a.str_or_empty(self.args, "smartModeBlockReason").strip()
            if a.get_bool(self.args, "requestSmartModeApproval") and reason:
                ma.smart_mode_approval.CopyFrom(
                    agent_pb2.SmartModeApproval(request_id=self.tool_call_id, reason=reason)
                )
        return ma

    def _resolve(self) -> tuple[str | None, McpTool | None, str]:
        """(problem, the tool, the server identifier). The flat definition of (server, tool)
        gives the names `mcp_args` carries; a tool only the descriptors list goes by its own
        name on the server ([U]: the client resolves it by server_identifier and tool_name)."""
        directory = self.settings.mcp
        server_key = a.str_or_empty(self.args, "server")
        tool_name = a.str_or_empty(self.args, "toolName")
        server = directory.server(server_key)
        identifier = server.identifier if server is not None else server_key
        route = directory.route(identifier, tool_name)
        if route is not None:
            return None, McpTool.of_route(route), identifier
        if server is None:
            known = _names(list(directory.server_identifiers()))
            return (
                f"Error: there is no MCP server {server_key!r}. Servers: {known}. Call "
                "CallMcpTool again with one of these identifiers.",
                None,
                identifier,
            )
        if not any(t.name == tool_name for t in server.tools):
            known = _names([t.name for t in server.tools])
            return (
                f"Error: the MCP server {identifier!r} has no tool {tool_name!r}. Its tools: "
                f"{known}.",
                None,
                identifier,
            )
        fallback = McpTool(
            name=tool_name,
            description="",
            parameters={},
            provider_identifier=identifier,
            tool_name=tool_name,
            definition_name=tool_name,
        )
        return None, fallback, identifier

    def _argument_problem(self) -> str | None:
        return ToolMachine._argument_problem(self) or self._args_problem

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        call = tc.mcp_tool_call
        if self._mcp_args is not None:
            call.args.CopyFrom(self._mcp_args)
        else:
            call.args.tool_name = a.str_or_empty(self.args, "toolName")
            call.args.server_identifier = a.str_or_empty(self.args, "server")
            call.args.tool_call_id = self.tool_call_id
        description = a.get_str(self.args, "description")
        if description:
            call.description = description
        return tc


# -- resources --------------------------------------------------------------------------------


class FetchMcpResourceMachine(ToolMachine):
    CARD = "read_mcp_resource_tool_call"
    REQUIRED = ("server", "uri")

    def _exec_args(self) -> agent_pb2.ReadMcpResourceExecArgs:
        out = agent_pb2.ReadMcpResourceExecArgs(
            server=a.str_or_empty(self.args, "server"),
            uri=a.str_or_empty(self.args, "uri"),
            tool_call_id=self.tool_call_id,
        )
        download = a.get_str(self.args, "downloadPath")
        if download:
            out.download_path = download
        return out

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.read_mcp_resource_tool_call.args.CopyFrom(self._exec_args())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        error = tc.read_mcp_resource_tool_call.result.error
        error.uri = a.str_or_empty(self.args, "uri")
        error.error = text

    def _first_exec(self) -> bytes:
        return self._exec("read_mcp_resource_exec_args", self._exec_args())

    def _on_result(self, result: agent_pb2.ReadMcpResourceExecResult, now_ms: int) -> Step:
        uri = a.str_or_empty(self.args, "uri")
        server = a.str_or_empty(self.args, "server")
        tc = self._card()
        tc.read_mcp_resource_tool_call.result.CopyFrom(result)
        match result.WhichOneof("result"):
            case "success":
                text, images = self._success_text(result.success, uri)
                return self._finish(text, tc, now_ms, images=images)
            case "error":
                reason = result.error.error or "unknown error"
                text = f"Error: the MCP resource {uri} of server {server} was not read: {reason}"
            case "rejected":
                reason = result.rejected.reason or "no reason"
                text = f"The user rejected reading the MCP resource {uri}: {reason}"
            case "not_found":
                text = f"Error: the MCP server {server} has no resource {uri}."
            case _:
                text = f"Error: the client sent an empty result for the MCP resource {uri}."
                tc.read_mcp_resource_tool_call.ClearField("result")
                self._set_error(tc, text)
        return self._finish(text, tc, now_ms, is_error=True)

    def _success_text(
        self, success: agent_pb2.ReadMcpResourceSuccess, uri: str
    ) -> tuple[str, tuple[ImageContent, ...]]:
        facts = [x for x in (success.name, success.mime_type) if x]
        about = f"MCP resource {success.uri or uri}" + (f" ({', '.join(facts)})" if facts else "")
        saved = success.download_path or a.get_str(self.args, "downloadPath")
        if saved and success.WhichOneof("content") is None:
            return f"{about} was saved to {saved}.", ()
        match success.WhichOneof("content"):
            case "text":
                return f"{about}:\n{clip_middle(success.text)}", ()
            case "blob":
                return self._blob_text(about, success.blob, success.mime_type)
            case _:
                return f"{about} has no content.", ()

    def _blob_text(
        self, about: str, blob: bytes, mime_type: str
    ) -> tuple[str, tuple[ImageContent, ...]]:
        info = sniff_image(blob)
        if info is None:
            return f"{about} is binary content ({len(blob)} bytes), not shown.", ()
        if not self.settings.vision:
            return f"{about} is an image; this model cannot view images, so it is not shown.", ()
        if len(blob) > MAX_IMAGE_BYTES:
            return (
                f"{about} is an image larger than the {MAX_IMAGE_BYTES} bytes an image may have "
                "to be shown to the model, so it is not shown.",
                (),
            )
        image = ImageContent(
            data=base64.b64encode(blob).decode("ascii"), mime_type=info.kind.mime_type
        )
        return f"{about}: the image is attached.", (image,)

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"read_mcp_resource_exec_result": _on_result}}


class ListMcpResourcesMachine(ToolMachine):
    CARD = "list_mcp_resources_tool_call"

    def _exec_args(self) -> agent_pb2.ListMcpResourcesExecArgs:
        out = agent_pb2.ListMcpResourcesExecArgs()
        server = a.get_str(self.args, "server")
        if server:
            out.server = server
        return out

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.list_mcp_resources_tool_call.args.CopyFrom(self._exec_args())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.list_mcp_resources_tool_call.result.error.error = text

    def _first_exec(self) -> bytes:
        return self._exec("list_mcp_resources_exec_args", self._exec_args())

    def _on_result(self, result: agent_pb2.ListMcpResourcesExecResult, now_ms: int) -> Step:
        tc = self._card()
        tc.list_mcp_resources_tool_call.result.CopyFrom(result)
        match result.WhichOneof("result"):
            case "success":
                lines = [_resource_line(r) for r in result.success.resources]
                text = "\n".join(lines) if lines else "No MCP resources are published."
                return self._finish(clip_middle(text), tc, now_ms)
            case "error":
                text = f"Error: the MCP resources could not be listed: {result.error.error}"
            case "rejected":
                reason = result.rejected.reason or "no reason"
                text = f"The user rejected listing the MCP resources: {reason}"
            case _:
                text = "Error: the client sent an empty result for ListMcpResources."
                tc.list_mcp_resources_tool_call.ClearField("result")
                self._set_error(tc, text)
        return self._finish(text, tc, now_ms, is_error=True)

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"list_mcp_resources_exec_result": _on_result}}


def _resource_line(r: agent_pb2.ListMcpResourcesExecResult.McpResource) -> str:
    facts = [x for x in (r.name, r.mime_type) if x]
    line = f"- {r.uri}" + (f" ({', '.join(facts)})" if facts else "")
    if r.server:
        line += f" [server {r.server}]"
    if r.description:
        line += f": {r.description}"
    return line
