"""The tool catalogue per mode, as data: which tools each Cursor mode offers, in which order,
which issue builds each tool, whether it is built, and what switches it off.

One table serves every mode so that a conversation's tool list is a pure function of its mode
and the run's switches: the same inputs give the same list in the same order (prompt cache).
docs/tools.md mirrors it; a test keeps the two equal. Change anything here (a tool built, a
gate, an order) and bump CATALOGUE_VERSION: every model call records the version it was built
with, so an operator can see why a prompt cache missed.

The mode lists follow the reference (cursor-native-tools.md §1, JLW's mode files, [S]); ask mode
has no mode file there ([U]): we offer GoL's list, agent minus SwitchMode and GenerateImage, and
refuse its workspace-changing calls ourselves (REFUSED).
"""

from __future__ import annotations

import enum
from typing import assert_never

import msgspec

# Bump on every change to the table below (or to what a mode offers).
CATALOGUE_VERSION = 12


class Mode(enum.StrEnum):
    """The modes with a tool list of their own (AgentMode, plus child runs)."""

    AGENT = "agent"
    ASK = "ask"
    PLAN = "plan"
    DEBUG = "debug"
    MULTITASK = "multitask"
    SUBAGENT = "subagent"  # a child run (AgentRunRequest.subagent_type_name set)


class Status(enum.StrEnum):
    BUILT = "built"  # offered when its mode lists it and no gate switches it off
    NOT_YET = "not yet"  # its issue has not landed: never offered


class Gate(enum.StrEnum):
    """What can switch a tool off for one run. Each names where it comes from."""

    # RequestContext.web_search_enabled (17): offered only when the client says true.
    WEB_SEARCH_ENABLED = "web_search_enabled"
    # RequestContext.web_fetch_enabled (24): offered only when the client says true.
    WEB_FETCH_ENABLED = "web_fetch_enabled"
    # RequestContext.read_lints_enabled (35): off only when the client says false.
    READ_LINTS_ENABLED = "read_lints_enabled"
    # AgentRunRequest.suppress_subagent_progress_update_tool (22): off when the client says true.
    SUPPRESS_SUBAGENT_PROGRESS_UPDATE_TOOL = "suppress_subagent_progress_update_tool"
    # McpMetaToolOptions.enabled (the mcps part's field 4, else RequestContext field 34):
    # offered only when the client says true; flat MCP tools are then not listed.
    MCP_META_TOOLS = "mcp_meta_tool_options.enabled"
    # Our configuration: server.disabled_tools names tools the operator switched off.
    CONFIG_DISABLED_TOOLS = "server.disabled_tools"
    # Our configuration: an opt-in tool is offered only when server.enabled_tools names it.
    CONFIG_ENABLED_TOOLS = "server.enabled_tools"
    # Our configuration: [web_search] names at least one backend (server-wide or per model).
    CONFIG_WEB_SEARCH = "web_search.backends"
    # Our configuration: an [image_generation] table names the endpoint GenerateImage uses.
    IMAGE_GENERATION = "[image_generation]"
    # Our configuration: a child run nested server.subagent_max_depth deep starts no more.
    SUBAGENT_DEPTH = "server.subagent_max_depth"


ISSUE_NATIVE = 14  # this issue: Cursor's own agent in every mode
ISSUE_MCP_WEB = 15  # MCP and web
ISSUE_SUBAGENTS = 17  # subagents


class CatalogueTool(msgspec.Struct, frozen=True):
    name: str
    issue: int
    status: Status
    gates: tuple[Gate, ...] = ()
    note: str = ""  # why it is where it is, when that is a choice of ours


def _tool(name: str, issue: int, status: Status, *gates: Gate, note: str = "") -> CatalogueTool:
    # Every tool can be switched off by the operator: the config gate closes every list.
    return CatalogueTool(name, issue, status, (*gates, Gate.CONFIG_DISABLED_TOOLS), note)


_B, _N = Status.BUILT, Status.NOT_YET

# Catalogue order: every mode lists its tools in this order. The tools built first keep the
# front, so a conversation in agent mode kept its prefix when the table was introduced.
TOOLS: tuple[CatalogueTool, ...] = (
    _tool("Shell", ISSUE_NATIVE, _B),
    _tool("Read", ISSUE_NATIVE, _B),
    _tool("Write", ISSUE_NATIVE, _B),
    _tool("StrReplace", ISSUE_NATIVE, _B),
    _tool("Delete", ISSUE_NATIVE, _B),
    _tool(
        "LS",
        ISSUE_NATIVE,
        _B,
        note="ours (GoL has Ls); not in Cursor's list; kept wherever Read is",
    ),
    _tool("Grep", ISSUE_NATIVE, _B),
    _tool("Glob", ISSUE_NATIVE, _B),
    _tool("AwaitShell", ISSUE_NATIVE, _B),
    _tool(
        "WriteShellStdin",
        ISSUE_NATIVE,
        _B,
        Gate.CONFIG_ENABLED_TOOLS,
        note=(
            "not in Cursor's model list (GoL offers it); listed wherever AwaitShell is, for "
            "point 7's 'where the client supports it': opt-in (server.enabled_tools), since "
            "no client says it keeps a shell's stdin open; with it on, Shell asks the client "
            "to keep stdin open"
        ),
    ),
    _tool("EditNotebook", ISSUE_NATIVE, _B),
    _tool("ReadLints", ISSUE_NATIVE, _B, Gate.READ_LINTS_ENABLED),
    _tool("TodoWrite", ISSUE_NATIVE, _B),
    _tool("CreatePlan", ISSUE_NATIVE, _B),
    _tool("AskQuestion", ISSUE_NATIVE, _B),
    _tool("SwitchMode", ISSUE_NATIVE, _B),
    _tool(
        "Task",
        ISSUE_SUBAGENTS,
        _B,
        Gate.SUBAGENT_DEPTH,
        note="our subagent types: generalPurpose, explore, shell; models from the client's list",
    ),
    _tool(
        "UpdateCurrentStep",
        ISSUE_SUBAGENTS,
        _B,
        Gate.SUPPRESS_SUBAGENT_PROGRESS_UPDATE_TOOL,
    ),
    _tool("WebSearch", ISSUE_MCP_WEB, _B, Gate.WEB_SEARCH_ENABLED, Gate.CONFIG_WEB_SEARCH),
    _tool("WebFetch", ISSUE_MCP_WEB, _B, Gate.WEB_FETCH_ENABLED),
    _tool("GenerateImage", ISSUE_MCP_WEB, _B, Gate.IMAGE_GENERATION),
    _tool("GetMcpTools", ISSUE_MCP_WEB, _B, Gate.MCP_META_TOOLS),
    _tool("CallMcpTool", ISSUE_MCP_WEB, _B, Gate.MCP_META_TOOLS),
    _tool("FetchMcpResource", ISSUE_MCP_WEB, _B, Gate.MCP_META_TOOLS),
    _tool(
        "ListMcpResources",
        ISSUE_MCP_WEB,
        _B,
        Gate.MCP_META_TOOLS,
        note=(
            "not in Cursor's model list (GoL has it); listed wherever FetchMcpResource is, "
            "because nothing else tells the model which resource URIs exist"
        ),
    ),
)
TOOLS_BY_NAME: dict[str, CatalogueTool] = {t.name: t for t in TOOLS}

_AGENT = (
    "Shell", "Read", "Write", "StrReplace", "Delete", "LS", "Grep", "Glob", "AwaitShell",
    "WriteShellStdin", "EditNotebook", "ReadLints", "TodoWrite", "AskQuestion", "SwitchMode",
    "Task", "WebSearch", "WebFetch", "GenerateImage", "GetMcpTools", "CallMcpTool",
    "FetchMcpResource", "ListMcpResources",
)  # fmt: skip
_DEBUG = (
    "Shell", "Read", "Write", "StrReplace", "Delete", "LS", "Grep", "Glob", "ReadLints",
    "TodoWrite", "AskQuestion", "Task", "WebSearch", "WebFetch", "CallMcpTool",
    "FetchMcpResource", "ListMcpResources",
)  # fmt: skip


def _in_order(names: set[str]) -> tuple[str, ...]:
    return tuple(t.name for t in TOOLS if t.name in names)


# Every mode's tools, in catalogue order.
MODES: dict[Mode, tuple[str, ...]] = {
    Mode.AGENT: _AGENT,
    # [U] no mode file: GoL's ask list (agent minus SwitchMode and GenerateImage); the real
    # Cursor's ask tool text is larger than agent's (CAP), so ask is not a reduced list.
    Mode.ASK: _in_order(set(_AGENT) - {"SwitchMode", "GenerateImage"}),
    Mode.PLAN: (
        "Shell",
        "Read",
        "LS",
        "Grep",
        "Glob",
        "ReadLints",
        "TodoWrite",
        "CreatePlan",
        "AskQuestion",
        "Task",
        "WebSearch",
        "WebFetch",
        "CallMcpTool",
        "FetchMcpResource",
        "ListMcpResources",
    ),
    Mode.DEBUG: _DEBUG,
    Mode.MULTITASK: _in_order(set(_DEBUG) | {"SwitchMode", "GenerateImage"}),
    Mode.SUBAGENT: _in_order((set(_AGENT) - {"AskQuestion"}) | {"UpdateCurrentStep"}),
}

# Calls the server answers with an error itself, never sending them to the client: ask mode
# never changes the workspace, whatever the model calls (nor does a helper it would start:
# a child run has the subagent tools, which change the workspace).
REFUSED: dict[Mode, frozenset[str]] = {
    Mode.ASK: frozenset(
        {"Write", "StrReplace", "EditNotebook", "Delete", "Shell", "WriteShellStdin", "Task"}
    ),
}


class Switches(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """The run's gate values, as the client (and our config) gave them.

    None means the client did not say; each gate's comment above says what that does."""

    web_search_enabled: bool | None = None
    web_fetch_enabled: bool | None = None
    read_lints_enabled: bool | None = None
    suppress_subagent_progress_update_tool: bool | None = None
    mcp_meta_tools: bool | None = None
    disabled_tools: tuple[str, ...] = ()
    enabled_tools: tuple[str, ...] = ()  # server.enabled_tools: the opt-in tools switched on
    web_search_configured: bool = False  # [web_search] has a backend to search with
    image_generation: bool | None = None  # True: this server has an [image_generation]
    # True: this run is nested server.subagent_max_depth deep: Task is not offered.
    subagent_depth_reached: bool | None = None


DEFAULT_SWITCHES = Switches()


def mode_of(name: str) -> Mode:
    """The catalogue mode of a context's mode name; any other mode offers agent's tools."""
    try:
        return Mode(name)
    except ValueError:
        return Mode.AGENT


def gate_open(gate: Gate, tool: str, switches: Switches) -> bool:
    match gate:
        case Gate.WEB_SEARCH_ENABLED:
            return switches.web_search_enabled is True
        case Gate.WEB_FETCH_ENABLED:
            return switches.web_fetch_enabled is True
        case Gate.READ_LINTS_ENABLED:
            return switches.read_lints_enabled is not False
        case Gate.SUPPRESS_SUBAGENT_PROGRESS_UPDATE_TOOL:
            return switches.suppress_subagent_progress_update_tool is not True
        case Gate.MCP_META_TOOLS:
            return switches.mcp_meta_tools is True
        case Gate.CONFIG_DISABLED_TOOLS:
            return tool not in switches.disabled_tools
        case Gate.CONFIG_ENABLED_TOOLS:
            return tool in switches.enabled_tools
        case Gate.CONFIG_WEB_SEARCH:
            return switches.web_search_configured
        case Gate.IMAGE_GENERATION:
            return switches.image_generation is True
        case Gate.SUBAGENT_DEPTH:
            return switches.subagent_depth_reached is not True
        case _:
            assert_never(gate)


def offered(mode: Mode, switches: Switches = DEFAULT_SWITCHES) -> tuple[str, ...]:
    """The native tools offered in `mode`, in catalogue order: built, and every gate open."""
    out: list[str] = []
    for name in MODES[mode]:
        tool = TOOLS_BY_NAME[name]
        if tool.status is not Status.BUILT:
            continue
        if all(gate_open(g, name, switches) for g in tool.gates):
            out.append(name)
    return tuple(out)


def refused(mode: Mode) -> frozenset[str]:
    return REFUSED.get(mode, frozenset())


def keeps_stdin(mode: str, switches: Switches = DEFAULT_SWITCHES) -> bool:
    """Whether a Shell command's stdin stays open: only with WriteShellStdin offered."""
    return "WriteShellStdin" in offered(mode_of(mode), switches)
