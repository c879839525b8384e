"""The catalogue's tools for the web and for MCP through the meta-tools (issue 15): the server
runs a search, the IDE fetches a page, an endpoint makes an image, the client's MCP servers are
reached by server and tool name. Names and parameters are Cursor's; the descriptions ours."""

from __future__ import annotations

from .tool_spec import ToolSpec
from .tool_spec import object_schema as _object
from .tool_spec import string_schema as _string

__all__ = [
    "CALL_MCP_TOOL",
    "FETCH_MCP_RESOURCE",
    "GENERATE_IMAGE",
    "GET_MCP_TOOLS",
    "LIST_MCP_RESOURCES",
    "WEB_FETCH",
    "WEB_SEARCH",
]

WEB_FETCH = ToolSpec(
    name="WebFetch",
    description=(
        "Read one web page: give its full http:// or https:// URL. The user approves the "
        "fetch first. You get the page as plain text with a markdown shape (long pages are "
        "cut, and say so). Use it for a page you know or were given; it does not search."
    ),
    parameters=_object(
        {
            "url": _string("The page's full URL, with http:// or https://."),
            "requestSmartModeApproval": {
                "type": "boolean",
                "description": "Ask for the user's approval even where fetches are automatic.",
            },
            "smartModeBlockReason": _string(
                "When asking for approval: why this fetch needs the user's eye."
            ),
        },
        ["url"],
    ),
    side_effects=False,
)

GENERATE_IMAGE = ToolSpec(
    name="GenerateImage",
    description=(
        "Make a new image from a text description and save it in the workspace's root "
        "folder. The user approves first. Describe the picture fully (subject, style, "
        "colours, layout); you are told the path it was saved to."
    ),
    parameters=_object(
        {
            "description": _string("What the image shows, in detail."),
            "filename": _string(
                "A bare file name for the image, such as logo.png (no folders); an existing "
                "file of that name is replaced."
            ),
            "aspect_ratio": {
                "type": "string",
                "enum": ["1:1", "4:3", "3:4", "16:9", "9:16"],
                "description": "The image's shape; square when left out.",
            },
            "reference_image_paths": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Workspace images the new one should resemble (shown to the user).",
            },
        },
        ["description"],
    ),
    side_effects=True,
)

# Answered by the server after the IDE's approval: the search runs on a configured backend,
# never on the user's machine. Name and parameters are Cursor's (reference §2.14).
WEB_SEARCH = ToolSpec(
    name="WebSearch",
    description=(
        "Search the web and get back a numbered list of pages, each with its title, URL and a "
        "short excerpt. Use it for facts that may be newer than your training or that you "
        "cannot find in the workspace: current versions, release notes, error messages, "
        "documentation. The user may have to approve each search. Cite the URLs you rely on."
    ),
    parameters=_object(
        {
            "search_term": _string(
                "What to search for, as you would type it into a search engine; include "
                "versions or dates when they matter."
            ),
            "explanation": _string("Why this search helps, in one sentence for the user."),
        },
        ["search_term"],
    ),
    side_effects=False,
)

# The MCP meta-tools (reference §2.18): offered instead of one tool per MCP tool when the client
# asks for them (catalogue Gate.MCP_META_TOOLS). Names and parameters are Cursor's; the
# descriptions are ours. The servers are listed in the system prompt (prompt.py).
_SERVER = _string("The MCP server's identifier, as the system prompt lists it.")
_SMART_MODE = {
    "requestSmartModeApproval": {
        "type": "boolean",
        "description": "Set on a retry after an automatic review blocked the call, to ask the "
        "user to approve it.",
    },
    "smartModeBlockReason": _string("The reason the review gave for blocking the call."),
}

GET_MCP_TOOLS = ToolSpec(
    name="GetMcpTools",
    description=(
        "Look up the tools of the user's MCP servers: each tool's name, what it does and the "
        "JSON Schema of its arguments. Read a tool's schema here before calling it with "
        "CallMcpTool. Without arguments it lists every server's tools; narrow it with server, "
        "toolName or pattern."
    ),
    parameters=_object(
        {
            "server": _string("Only this server's tools (its identifier)."),
            "toolName": _string("Only this tool (give server too)."),
            "pattern": _string(
                "A regular expression (at most 256 characters) matched against tool and "
                "server names."
            ),
        },
        [],
    ),
    side_effects=False,
)

CALL_MCP_TOOL = ToolSpec(
    name="CallMcpTool",
    description=(
        "Call a tool of one of the user's MCP servers and return what it answers. Give the "
        "server's identifier, the tool's name and its arguments as the tool's schema "
        "(GetMcpTools) describes them."
    ),
    parameters=_object(
        {
            "server": _SERVER,
            "toolName": _string("The tool's name on that server."),
            "arguments": {
                "type": "object",
                "description": "The tool's arguments, matching its input schema.",
            },
            "description": _string("One plain sentence on what this call does, for the user."),
            **_SMART_MODE,
        },
        ["server", "toolName"],
    ),
    side_effects=True,
)

FETCH_MCP_RESOURCE = ToolSpec(
    name="FetchMcpResource",
    description=(
        "Read one resource an MCP server publishes, by its URI (ListMcpResources lists them). "
        "With downloadPath the editor saves it into the workspace instead of returning it."
    ),
    parameters=_object(
        {
            "server": _SERVER,
            "uri": _string("The resource's URI."),
            "downloadPath": _string(
                "Save the resource to this workspace path instead of returning its content."
            ),
            **_SMART_MODE,
        },
        ["server", "uri"],
    ),
    side_effects=True,  # downloadPath writes a file
)

LIST_MCP_RESOURCES = ToolSpec(
    name="ListMcpResources",
    description=(
        "List the resources (documents, files, records) the user's MCP servers publish, with "
        "their URIs for FetchMcpResource. Give server for one server's resources only."
    ),
    parameters=_object({"server": _string("Only this server's resources (its identifier).")}, []),
    side_effects=False,
)

# The meta-tools' names: the context meter counts them with the MCP tools they reach.
MCP_META_TOOLS: frozenset[str] = frozenset(
    t.name for t in (GET_MCP_TOOLS, CALL_MCP_TOOL, FETCH_MCP_RESOURCE, LIST_MCP_RESOURCES)
)
