"""MCP tools on the client: mcp_args from the tool's route, results with text and images,
and every error variant."""

from __future__ import annotations

from typing import Any

import pytest

from cursor_byok.llm.types import ImageContent, TextContent, ToolResultMessage
from cursor_byok.transport.cursor.mcp import McpDefinition, McpIndex, McpTool
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import McpMachine, Phase, Send, ToolMachine
from cursor_byok.transport.cursor.tools.images import MAX_IMAGE_BYTES
from tests.cursor.tool_support import (
    T0,
    begin,
    completed,
    completed_card,
    decode,
    esm,
    finished,
    machine,
    reply,
    start,
    started_card,
)


def _weather() -> McpTool:
    index = McpIndex.build(
        [
            McpDefinition(
                name="get_weather",
                tool_name="get_weather",
                provider_identifier="pi-agent",
                description="",
                parameters={"type": "object", "properties": {"city": {"type": "string"}}},
            )
        ]
    )
    return index["get_weather"]


def _mcp(args: dict[str, Any], *, vision: bool = True) -> tuple[ToolMachine, a.McpArgs]:
    tool, out, _ = start("get_weather", args, mcp=_weather(), vision=vision)
    assert isinstance(tool, McpMachine)
    assert started_card(out).mcp_tool_call.args.name == "get_weather"
    return tool, esm(out).mcp_args


def test_mcp_args_and_success() -> None:
    tool, ma = _mcp({"city": "Paris", "days": 2, "opts": {"metric": True}})
    assert (ma.name, ma.tool_name, ma.provider_identifier, ma.tool_call_id) == (
        "get_weather",
        "get_weather",
        "pi-agent",
        "toolu_1",
    )
    assert ma.args["city"].string_value == "Paris"
    assert ma.args["days"].number_value == 2
    assert ma.args["opts"].struct_value.fields["metric"].bool_value is True
    success = a.McpSuccess()
    success.content.add().text.text = "Sunny, 21C in Paris"
    success.content.add().image.CopyFrom(a.McpImageContent(data=b"\x89PNG", mime_type="image/png"))
    done = finished(tool.feed(reply(1, mcp_result=a.McpResult(success=success)), T0))
    assert done.result.content == (
        TextContent(text="Sunny, 21C in Paris"),
        ImageContent(data="iVBORw==", mime_type="image/png"),
    )
    assert not done.result.is_error
    assert completed(done).mcp_tool_call.result.success == success
    assert tool.phase is Phase.DONE


def test_an_image_result_is_a_note_for_a_model_that_cannot_see_images() -> None:
    tool, _ = _mcp({"city": "Paris"}, vision=False)
    success = a.McpSuccess()
    success.content.add().text.text = "Radar:"
    success.content.add().image.CopyFrom(a.McpImageContent(data=b"\x89PNG", mime_type="image/png"))
    done = finished(tool.feed(reply(1, mcp_result=a.McpResult(success=success)), T0))
    assert done.result.content == (
        TextContent(
            text="Radar:\n[The tool returned an image (image/png, 4 bytes); this model cannot "
            "view images: not shown]"
        ),
    )
    assert completed(done).mcp_tool_call.result.success == success  # the IDE still shows it


def test_an_image_over_the_limit_is_a_note_even_for_a_vision_model() -> None:
    tool, _ = _mcp({"city": "Paris"})
    success = a.McpSuccess()
    big = b"\x89PNG" + bytes(MAX_IMAGE_BYTES)
    success.content.add().image.CopyFrom(a.McpImageContent(data=big, mime_type="image/png"))
    done = finished(tool.feed(reply(1, mcp_result=a.McpResult(success=success)), T0))
    (only,) = done.result.content
    assert isinstance(only, TextContent) and "larger than the" in only.text


def test_mcp_route_names_differ_from_the_model_facing_name() -> None:
    route = McpTool(
        name="github__search",
        description="",
        parameters={},
        provider_identifier="github",
        tool_name="search",
        definition_name="search_code",
    )
    _tool, out, _ = start("github__search", {"q": "x"}, mcp=route)
    ma = esm(out).mcp_args
    assert (ma.name, ma.tool_name, ma.provider_identifier) == ("search_code", "search", "github")
    assert started_card(out).mcp_tool_call.args == ma


def test_mcp_image_without_mime_type_is_png() -> None:
    tool, _ = _mcp({"city": "x"})
    success = a.McpSuccess()
    success.content.add().image.data = b"\x00"
    done = finished(tool.feed(reply(1, mcp_result=a.McpResult(success=success)), T0))
    assert done.result.content == (
        TextContent(text="(no text content)"),
        ImageContent(data="AA==", mime_type="image/png"),
    )


@pytest.mark.parametrize(
    ("result", "expect", "variant"),
    [
        (a.McpResult(success=a.McpSuccess(is_error=True)), "(no text content)", "success"),
        (a.McpResult(error=a.McpError(error="upstream 500")), "upstream 500", "error"),
        (a.McpResult(rejected=a.McpRejected(reason="nope")), "rejected this call", "rejected"),
        (
            a.McpResult(permission_denied=a.McpPermissionDenied(error="blocked")),
            "blocked",
            "permission_denied",
        ),
        (
            a.McpResult(
                tool_not_found=a.McpToolNotFound(name="get_weather", available_tools=["a"])
            ),
            "has no MCP tool 'get_weather' (available: a)",
            "error",
        ),
        (
            a.McpResult(server_not_found=a.McpServerNotFound(name="pi-agent")),
            "is not available",
            "error",
        ),
        (a.McpResult(), "empty result for MCP tool get_weather", "error"),
    ],
)
def test_mcp_errors(result: a.McpResult, expect: str, variant: str) -> None:
    tool, _ = _mcp({"city": "x"})
    done = finished(tool.feed(reply(1, mcp_result=result), T0))
    assert done.result.is_error and expect in done.result.text
    assert completed(done).mcp_tool_call.result.WhichOneof("result") == variant


def test_mcp_approved_is_not_terminal_and_unknown_tool_still_goes_out() -> None:
    tool, _ = _mcp({"city": "x"})
    approved = reply(1, mcp_result=a.McpResult(approved=a.McpApproved()))
    assert tool.feed(approved, T0) == Send(())
    assert tool.phase is Phase.RUNNING and tool.exec_ids == {1}
    tool, out, _ = start("not_offered", {"q": 1})
    ma = esm(out).mcp_args
    assert (ma.name, ma.tool_name, ma.provider_identifier) == ("not_offered", "not_offered", "")


def test_mcp_arguments_a_value_cannot_hold_end_the_call_early() -> None:
    # 10**400 is valid JSON, but too large for a protobuf Value (the old code raised here).
    tool, started, ids = begin("get_weather", {"city": "x", "n": 10**400}, mcp=_weather())
    assert started.early is not None and started.early.result.is_error
    assert "cannot be sent to the client" in started.early.result.text
    assert ids.next == 1 and tool.exec_ids == set() and tool.phase is Phase.DONE
    (only,) = decode(started.frames)
    assert only.interaction_update.tool_call_started.tool_call.mcp_tool_call.args.name == (
        "get_weather"
    )
    card = completed(started.early).mcp_tool_call
    assert card.result.error.error == started.early.result.text


def test_mcp_complete_locally() -> None:
    tool = machine("get_weather", {"city": "Oslo"}, mcp=_weather())
    canceled = ToolResultMessage(
        tool_call_id="toolu_1",
        tool_name="get_weather",
        content=(TextContent(text="Error: canceled"),),
        is_error=True,
    )
    tc = completed_card(tool.complete_locally(canceled, T0), started_at_ms=T0)
    assert tc.mcp_tool_call.args.provider_identifier == "pi-agent"
    assert tc.mcp_tool_call.args.args["city"].string_value == "Oslo"
    assert tc.mcp_tool_call.result.error.error == "Error: canceled"
    assert tc.started_at_ms == tc.completed_at_ms == T0
    assert tool.phase is Phase.DONE
