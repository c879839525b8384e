"""MCP tools: any tool name that is not native, run with one `mcp_args` exec.

The call goes to the route the client gave when it offered the tool (`McpTool`); a name with
no route goes out as it is, and the client answers tool_not_found, which the model can read.
CallMcpTool (mcp_meta.py) runs through the same machine with the route it resolves.

Images in a result reach a model that sees images as images (ToolSettings.vision, the same rule
as Read's); any other model, or an image over MAX_IMAGE_BYTES, reads a line saying what was
left out.
"""

from __future__ import annotations

import base64
from typing import Any, ClassVar

from google.protobuf import (  # type: ignore[import-untyped,unused-ignore]
    json_format,
    struct_pb2,
)

from ....llm.types import ImageContent, ToolCall
from ..mcp import McpTool
from ..proto import agent_pb2
from . import cards
from .format import clip_middle
from .images import MAX_IMAGE_BYTES
from .machine import Finished, Handlers, Phase, Send, Step, ToolMachine, ToolSettings

__all__ = ["McpMachine"]

# What ParseDict raises for a value a protobuf Value cannot hold (an integer past float range,
# a nesting too deep); JSON from a model can be any of these.
_UNSENDABLE = (json_format.ParseError, TypeError, ValueError, OverflowError, RecursionError)


class McpMachine(ToolMachine):
    CARD = "mcp_tool_call"

    def __init__(
        self,
        tool_call: ToolCall,
        *,
        call_id: str,
        model_call_id: str,
        settings: ToolSettings,
        tool: McpTool | None = None,
    ) -> None:
        super().__init__(tool_call, call_id=call_id, model_call_id=model_call_id, settings=settings)
        self.tool = tool
        self._args_problem: str | None = None
        self._mcp_args = self._build_args()

    @classmethod
    def placeholder(cls, name: str, tool_call_id: str) -> agent_pb2.ToolCall:
        tc = cards.placeholder(cls.CARD, tool_call_id)
        tc.mcp_tool_call.args.name = name
        tc.mcp_tool_call.args.tool_name = name
        return tc

    def _label(self) -> str:
        """How results and errors name the MCP tool."""
        return self.tool_call.name

    def _tool_arguments(self) -> dict[str, Any]:
        """The arguments the MCP tool itself gets (a flat tool's are the call's own)."""
        return self.args

    def _build_args(self) -> agent_pb2.McpArgs | None:
        tool, name = self.tool, self.tool_call.name
        ma = agent_pb2.McpArgs(
            name=tool.definition_name if tool else name,
            tool_name=tool.tool_name if tool else name,
            provider_identifier=tool.provider_identifier if tool else "",
            tool_call_id=self.tool_call_id,
        )
        arguments = self._tool_arguments()
        try:
            for key in sorted(arguments):
                value = struct_pb2.Value()
                json_format.ParseDict(arguments[key], value)
                ma.args[key].CopyFrom(value)
        except _UNSENDABLE as exc:
            self._args_problem = (
                f"Error: the arguments of the {self._label()} call cannot be sent to the client "
                f"({exc}). "
                "Call it again with plain JSON values."
            )
            return None
        return ma

    def _argument_problem(self) -> str | None:
        return self._args_problem

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        if self._mcp_args is not None:
            tc.mcp_tool_call.args.CopyFrom(self._mcp_args)
        else:
            tc.mcp_tool_call.args.name = self.tool_call.name
            tc.mcp_tool_call.args.tool_name = self.tool_call.name
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.mcp_tool_call.result.error.error = text

    def _first_exec(self) -> bytes:
        assert self._mcp_args is not None  # else `_argument_problem` ended the call
        return self._exec("mcp_args", self._mcp_args)

    def _on_mcp(self, result: agent_pb2.McpResult, now_ms: int) -> Step:
        name = self._label()
        tc = self._card()
        mcp = tc.mcp_tool_call.result
        match result.WhichOneof("result"):
            case "approved":
                return Send()  # the user approved the call; its result follows
            case "success":
                mcp.success.CopyFrom(result.success)
                return self._succeeded(result.success, tc, now_ms)
            case "rejected":
                mcp.rejected.CopyFrom(result.rejected)
                reason = result.rejected.reason or "no reason"
                text = f"The user rejected this call of {name}: {reason}"
                return self._finish(text, tc, now_ms, is_error=True)
            case "permission_denied":
                mcp.permission_denied.CopyFrom(result.permission_denied)
                text = f"Error: permission denied for {name}: {result.permission_denied.error}"
                return self._finish(text, tc, now_ms, is_error=True)
            case "error":
                text = f"Error from MCP tool {name}: {result.error.error or 'unknown error'}"
            case "tool_not_found":
                missing = result.tool_not_found
                available = ", ".join(missing.available_tools) or "none"
                text = (
                    f"Error: the client has no MCP tool {missing.name or name!r} "
                    f"(available: {available})."
                )
            case "server_not_found":
                servers = ", ".join(result.server_not_found.available_servers) or "none"
                text = (
                    f"Error: the MCP server {result.server_not_found.name!r} of {name} is not "
                    f"available on the client (available: {servers})."
                )
            case _:
                text = f"Error: the client sent an empty result for MCP tool {name}."
        mcp.error.error = text
        return self._finish(text, tc, now_ms, is_error=True)

    def _succeeded(
        self, success: agent_pb2.McpSuccess, tc: agent_pb2.ToolCall, now_ms: int
    ) -> Finished:
        """The text items joined, the images passed on as images (or a line each when the
        model cannot take them)."""
        texts: list[str] = []
        notes: list[str] = []
        images: list[ImageContent] = []
        for item in success.content:
            match item.WhichOneof("content"):
                case "text":
                    texts.append(item.text.text)
                case "image":
                    raw = item.image.data
                    mime = item.image.mime_type or "image/png"
                    about = f"The tool returned an image ({mime}, {len(raw)} bytes)"
                    if not self.settings.vision:
                        notes.append(f"[{about}; this model cannot view images: not shown]")
                    elif len(raw) > MAX_IMAGE_BYTES:
                        notes.append(
                            f"[{about}, larger than the {MAX_IMAGE_BYTES} bytes an image may "
                            "have to be shown to the model, so it is not shown]"
                        )
                    else:
                        data = base64.b64encode(raw).decode("ascii")
                        images.append(ImageContent(data=data, mime_type=mime))
        body = clip_middle("\n".join(texts)) if texts else ""
        text = "\n".join(x for x in (body, *notes) if x) or "(no text content)"
        return self._finish(text, tc, now_ms, is_error=success.is_error, images=tuple(images))

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"mcp_result": _on_mcp}}
