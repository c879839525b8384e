"""The MCP meta-tools' machines (mcp_meta.py) and the context they read (merge_context,
meta_servers): every argument problem and result variant gives the model a clear result."""

from __future__ import annotations

from typing import Any

import pytest

from cursor_byok.llm.types import ImageContent, TextContent
from cursor_byok.loop.context import McpRoute, McpServerInfo, McpToolInfo
from cursor_byok.transport.cursor import context as cx
from cursor_byok.transport.cursor.mcp import (
    McpDefinition,
    McpDirectory,
    McpMeta,
    McpServerDescriptor,
    McpToolDescriptor,
)
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import Finished, Send
from tests.cursor.test_tools_images import png
from tests.cursor.tool_support import (
    T0,
    begin,
    completed,
    esm,
    finished,
    reply,
    start,
)

SCHEMA = {"properties": {"q": {"type": "string"}}, "type": "object"}
DIRECTORY = McpDirectory(
    servers=(
        McpServerInfo(
            identifier="docs-server",
            name="Team docs",
            tools=(
                McpToolInfo(name="lookup_docs", description="Look it up.", parameters=SCHEMA),
                McpToolInfo(name="search_pages"),
            ),
        ),
        McpServerInfo(identifier="zeta", tools=(McpToolInfo(name="open_ticket"),)),
    ),
    routes=(
        McpRoute(name="lookup_docs", server="docs-server", tool="lookup_docs", definition="d"),
    ),
)


def early(name: str, args: dict[str, Any], **options: Any) -> Finished:
    _, started, _ = begin(name, args, mcp_directory=DIRECTORY, **options)
    assert started.early is not None and len(started.frames) == 1  # only tool_call_started
    return started.early


def text(done: Finished) -> str:
    first = done.result.content[0]
    assert isinstance(first, TextContent)
    return first.text


# -- GetMcpTools ------------------------------------------------------------------------------


def test_get_mcp_tools_without_arguments_lists_every_server() -> None:
    done = early("GetMcpTools", {})
    assert not done.result.is_error
    assert text(done) == (
        "MCP server docs-server (Team docs):\n"
        "- lookup_docs: Look it up.\n"
        '  Input schema: {"properties": {"q": {"type": "string"}}, "type": "object"}\n'
        "- search_pages: (no description)\n"
        '  Input schema: {"type": "object"}\n\n'
        "MCP server zeta:\n"
        "- open_ticket: (no description)\n"
        '  Input schema: {"type": "object"}'
    )
    card = completed(done).get_mcp_tools_tool_call
    assert card.result.success.content == text(done)
    assert not card.args.HasField("server") and card.args.tool_call_id == "toolu_1"


def test_get_mcp_tools_filters_by_pattern_and_tool() -> None:
    assert text(early("GetMcpTools", {"pattern": "^open"})).startswith("MCP server zeta:")
    one = text(early("GetMcpTools", {"server": "Team docs", "toolName": "search_pages"}))
    assert one.startswith("MCP server docs-server (Team docs):\n- search_pages:")
    assert "lookup_docs" not in one
    none = early("GetMcpTools", {"pattern": "nothing-like-this"})
    assert not none.result.is_error
    assert text(none) == (
        "No MCP tool matches pattern 'nothing-like-this'. Servers: docs-server (Team docs), zeta."
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"server": "nope"}, "Error: there is no MCP server 'nope'. Servers: docs-server"),
        ({"pattern": "("}, "Error: pattern is not a valid regular expression"),
        ({"pattern": "a" * 257}, "Error: pattern is longer than 256 characters."),
        (
            {"server": "zeta", "toolName": "x"},
            "Error: no MCP tool matches server 'zeta' and tool 'x'. Its tools: open_ticket.",
        ),
    ],
)
def test_get_mcp_tools_errors(args: dict[str, Any], expected: str) -> None:
    done = early("GetMcpTools", args)
    assert done.result.is_error and text(done).startswith(expected)
    assert completed(done).get_mcp_tools_tool_call.result.error.error == text(done)


def test_get_mcp_tools_with_no_servers() -> None:
    _, started, _ = begin("GetMcpTools", {})
    assert started.early is not None and started.early.result.is_error
    assert text(started.early) == "Error: no MCP servers are available in this conversation."


# -- CallMcpTool ------------------------------------------------------------------------------


def call(args: dict[str, Any], **options: Any) -> tuple[Any, a.McpArgs]:
    tool, out, _ = start("CallMcpTool", args, mcp_directory=DIRECTORY, **options)
    return tool, esm(out).mcp_args


def test_call_mcp_tool_takes_arguments_given_as_a_json_string() -> None:
    _, ma = call({"server": "docs-server", "toolName": "lookup_docs", "arguments": '{"q": "x"}'})
    assert (ma.name, ma.server_identifier, ma.args["q"].string_value) == ("d", "docs-server", "x")


def test_call_mcp_tool_retry_after_auto_review_carries_the_approval_request() -> None:
    args = {"server": "docs-server", "toolName": "lookup_docs", "requestSmartModeApproval": True}
    _, ma = call({**args, "smartModeBlockReason": " writes to the wiki "})
    assert (ma.smart_mode_approval.request_id, ma.smart_mode_approval.reason) == (
        ma.tool_call_id,
        "writes to the wiki",
    )
    _, plain = call(args)  # the flag without its reason: the ordinary path
    assert not plain.HasField("smart_mode_approval")


def test_call_mcp_tool_needs_server_and_tool() -> None:
    done = early("CallMcpTool", {"server": "docs-server"})
    assert text(done).startswith("Error: the CallMcpTool call is missing the required string")
    assert "toolName" in text(done)
    assert completed(done).mcp_tool_call.result.error.error == text(done)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (a.McpResult(error=a.McpError(error="boom")), "Error from MCP tool lookup_docs on MCP"),
        (a.McpResult(rejected=a.McpRejected(reason="no")), "The user rejected this call of"),
        (
            a.McpResult(permission_denied=a.McpPermissionDenied(error="ro")),
            "Error: permission denied for lookup_docs on MCP server docs-server: ro",
        ),
        (
            a.McpResult(tool_not_found=a.McpToolNotFound(name="x", available_tools=["y"])),
            "Error: the client has no MCP tool 'x' (available: y).",
        ),
        (
            a.McpResult(server_not_found=a.McpServerNotFound(name="s", available_servers=["t"])),
            "Error: the MCP server 's' of lookup_docs on MCP server docs-server is not",
        ),
        (a.McpResult(), "Error: the client sent an empty result for MCP tool lookup_docs on"),
    ],
)
def test_call_mcp_tool_result_variants(result: a.McpResult, expected: str) -> None:
    tool, _ = call({"server": "docs-server", "toolName": "lookup_docs"})
    done = finished(tool.feed(reply(1, mcp_result=result), T0))
    assert done.result.is_error and text(done).startswith(expected)
    assert completed(done).mcp_tool_call.args.server_identifier == "docs-server"


def test_call_mcp_tool_approved_waits_for_the_result() -> None:
    tool, _ = call({"server": "docs-server", "toolName": "lookup_docs"})
    assert tool.feed(reply(1, mcp_result=a.McpResult(approved=a.McpApproved())), T0) == Send()


# -- resources --------------------------------------------------------------------------------


def fetch(result: a.ReadMcpResourceExecResult, **options: Any) -> Finished:
    args = {"server": "docs-server", "uri": "docs://x"}
    tool, out, _ = start("FetchMcpResource", args, mcp_directory=DIRECTORY, **options)
    assert esm(out).read_mcp_resource_exec_args.uri == "docs://x"
    return finished(tool.feed(reply(1, read_mcp_resource_exec_result=result), T0))


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (
            a.ReadMcpResourceExecResult(error=a.ReadMcpResourceError(error="down")),
            "Error: the MCP resource docs://x of server docs-server was not read: down",
        ),
        (
            a.ReadMcpResourceExecResult(rejected=a.ReadMcpResourceRejected(reason="no")),
            "The user rejected reading the MCP resource docs://x: no",
        ),
        (
            a.ReadMcpResourceExecResult(not_found=a.ReadMcpResourceNotFound(uri="docs://x")),
            "Error: the MCP server docs-server has no resource docs://x.",
        ),
        (
            a.ReadMcpResourceExecResult(),
            "Error: the client sent an empty result for the MCP resource docs://x.",
        ),
    ],
)
def test_fetch_mcp_resource_failures(result: a.ReadMcpResourceExecResult, expected: str) -> None:
    done = fetch(result)
    assert done.result.is_error and text(done) == expected
    assert completed(done).read_mcp_resource_tool_call.result.WhichOneof("result") is not None


def test_fetch_mcp_resource_download_and_binary() -> None:
    saved = a.ReadMcpResourceSuccess(uri="docs://x", download_path="/w/x.md")
    done = fetch(a.ReadMcpResourceExecResult(success=saved))
    assert text(done) == "MCP resource docs://x was saved to /w/x.md."
    blob = a.ReadMcpResourceSuccess(uri="docs://x", blob=b"\x00\x01")
    assert text(fetch(a.ReadMcpResourceExecResult(success=blob))) == (
        "MCP resource docs://x is binary content (2 bytes), not shown."
    )


@pytest.mark.parametrize("vision", [True, False])
def test_fetch_mcp_resource_image_blob(vision: bool) -> None:
    image = png(2, 2)
    ok = a.ReadMcpResourceSuccess(uri="docs://p", mime_type="image/png", blob=image)
    done = fetch(a.ReadMcpResourceExecResult(success=ok), vision=vision)
    if vision:
        assert text(done) == "MCP resource docs://p (image/png): the image is attached."
        assert isinstance(done.result.content[1], ImageContent)
    else:
        assert len(done.result.content) == 1 and "cannot view images" in text(done)


def test_list_mcp_resources_variants() -> None:
    for result, expected, is_error in [
        (
            a.ListMcpResourcesExecResult(success=a.ListMcpResourcesSuccess()),
            "No MCP resources are published.",
            False,
        ),
        (
            a.ListMcpResourcesExecResult(error=a.ListMcpResourcesError(error="down")),
            "Error: the MCP resources could not be listed: down",
            True,
        ),
        (
            a.ListMcpResourcesExecResult(rejected=a.ListMcpResourcesRejected(reason="no")),
            "The user rejected listing the MCP resources: no",
            True,
        ),
    ]:
        tool, out, _ = start("ListMcpResources", {})
        assert not esm(out).list_mcp_resources_exec_args.HasField("server")
        done = finished(tool.feed(reply(1, list_mcp_resources_exec_result=result), T0))
        assert (text(done), done.result.is_error) == (expected, is_error)


# -- the context ------------------------------------------------------------------------------


def _meta(enabled: bool, *servers: McpServerDescriptor) -> McpMeta:
    return McpMeta(enabled=enabled, servers=servers)


FLAT = McpDefinition(
    name="flat_lookup",
    tool_name="lookup_docs",
    provider_identifier="docs-server",
    description="From the flat list.",
    parameters=SCHEMA,
)
DOCS = McpServerDescriptor(
    server_name="Team docs",
    server_identifier="docs-server",
    tools=(McpToolDescriptor(tool_name="lookup_docs", description="", parameters={}),),
)


def test_merge_takes_the_parts_meta_options_first_then_the_inline_ones() -> None:
    inline = cx.ClientContext(mcp_meta=_meta(False))
    part = cx.ContextPart(kind="mcps", mcp_meta=_meta(True, DOCS))
    ctx = cx.merge_context(inline, [part], [FLAT], mode="agent")
    assert ctx.switches.mcp_meta_tools is True and ctx.mcp_meta
    only_inline = cx.merge_context(
        cx.ClientContext(mcp_meta=_meta(True, DOCS)), [], [], mode="agent"
    )
    assert only_inline.mcp_meta
    off = cx.merge_context(inline, [], [FLAT], mode="agent")
    assert off.switches.mcp_meta_tools is False and off.mcp_servers == ()
    assert cx.merge_context(None, [], [FLAT], mode="agent").switches.mcp_meta_tools is None


def test_meta_servers_complete_descriptors_with_the_flat_definitions() -> None:
    extra = McpDefinition(
        name="t", tool_name="t", provider_identifier="alpha", description="d", parameters={}
    )
    ctx = cx.merge_context(
        cx.ClientContext(mcp_meta=_meta(True, DOCS)), [], [FLAT, extra], mode="agent"
    )
    alpha, docs = ctx.mcp_servers  # sorted by identifier; alpha is only in the flat list
    assert (alpha.identifier, alpha.name, [t.name for t in alpha.tools]) == ("alpha", "", ["t"])
    (lookup,) = docs.tools
    assert (lookup.description, lookup.parameters) == ("From the flat list.", SCHEMA)
    # The flat tools still route CallMcpTool, but the model no longer sees them one by one.
    assert {r.tool for r in ctx.mcp_routes} == {"lookup_docs", "t"}
