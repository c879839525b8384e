"""System prompt and tool list of a request: pure functions of the input and the state.

Neither function reads or changes `messages`. Both depend only on the turn's `TurnContext`, so
every LLM call of a turn sends the same system prompt and tools, which keeps provider prefix
caches warm.
"""

from __future__ import annotations

import json

from cursor_byok.llm.types import ToolDefinition

from .catalogue import Mode, mode_of, offered
from .context import DEFAULT_CONTEXT, Environment, McpServerInfo, TurnContext
from .custom_agents import agent_of, allowed_tools
from .inputs import Input, Start
from .memo import ByIdentity, ByValue
from .state import ConversationState
from .subagents import start_context
from .tools import NATIVE_BY_NAME, TASK, task_parameters

BASE_INSTRUCTIONS = """\
You are a coding agent working inside the user's editor. You help with software tasks by \
reading code, running commands and editing files.

How you work:
- Your tools run on the user's own machine, in their workspace, through the editor. What a tool \
does is real: files you write are written, commands you run are run.
- Look before you change: read the relevant files and search the code instead of guessing. \
Prefer small, focused edits with StrReplace; use Write for new files or complete rewrites.
- Paths may be absolute or relative to the workspace root.
- Call a tool only when you need its result. Independent calls may go in one response; they are \
run one after another in the order you give them.
- When a tool fails, read the error, adjust and try again or explain what went wrong. Do not \
repeat the same failing call unchanged.
- Be careful with anything destructive or hard to undo (deleting files, force pushes, resetting \
history, dropping data, installing system packages): ask the user first unless they asked for it \
explicitly.
- Never invent file contents, command output or test results. If you did not check something, \
say so.
- When you are done, answer briefly: what you changed or found, and anything the user should \
check. Use Markdown; put code in fenced blocks."""

READ_ONLY_NOTE = """\
This conversation is in {mode} mode: look, do not change anything. Do not edit, write or delete \
files and do not run commands that change the workspace; answer from what you can read."""

ASK_NOTE = """\
In ask mode the server refuses every call that writes, edits or deletes a file or runs a command; \
such a call only returns an error."""

PLAN_NOTE = """\
Produce a plan: the steps you would take, the files involved and the risks. Do not carry it \
out. When the plan is ready, hand it to the user with CreatePlan: they review it and start the \
work with its Build button."""


DEBUG_NOTE = """\
This conversation is in debug mode: find the cause of the problem from runtime evidence, not \
by reading code alone.
1. Name a few concrete hypotheses for the cause.
2. Add temporary instrumentation that records the values telling them apart: each event one \
JSON object with sessionId, hypothesisId, location (file and line), message, data and timestamp \
(milliseconds).
3. Ask the user to reproduce the problem, then read the evidence and say which hypotheses it \
confirms or rules out.
4. Fix the cause the evidence shows; keep the instrumentation until a reproduction confirms the \
fix, then remove every piece of it."""

DEBUG_SESSION_NOTE = """\
Debug session {session}: the editor collects the events.{endpoint}{log}"""


def _debug_section(context: TurnContext) -> str | None:
    """Debug mode's method, and where this session's evidence goes (debug_mode_config)."""
    if mode_of(context.mode) is not Mode.DEBUG:
        return None
    debug = context.debug
    if debug is None:
        return DEBUG_NOTE
    endpoint = (
        f" Send each event as an HTTP POST of the JSON object to {debug.server_endpoint}"
        + (
            ", or, where the code cannot reach it, append it as one line to the log file."
            if debug.log_path
            else "."
        )
        if debug.server_endpoint
        else ""
    )
    log = (
        f" The collected events are in {debug.log_path}, one JSON object per line: read it "
        "after each reproduction, and delete it before asking for the next one."
        if debug.log_path
        else ""
    )
    session = DEBUG_SESSION_NOTE.format(
        session=debug.session_id or "(no id)", endpoint=endpoint, log=log
    )
    return DEBUG_NOTE + "\n" + session


SUBAGENT_NOTE = """\
You are a helper agent: another agent gave you the task in the user message and reads only your \
final message. Work on your own; nobody answers questions. When you are done, end with a \
complete, self-contained report of what you did and found (files, results, anything left \
open): that report is all the other agent gets."""

SUBAGENT_TYPE_NOTES = {
    "explore": "Your task is to explore: search and read, change nothing.",
    "shell": "Your task is command-line work: use Shell for it and report the outcomes.",
}

SUBAGENT_PROGRESS_NOTE = """\
Report your progress with UpdateCurrentStep as you move from step to step; the user sees it."""


def _subagent_section(context: TurnContext) -> str | None:
    if mode_of(context.mode) is not Mode.SUBAGENT:
        return None
    lines = [SUBAGENT_NOTE]
    note = SUBAGENT_TYPE_NOTES.get(context.subagents.subagent_type)
    if note:
        lines.append(note)
    custom = agent_of(context)
    if custom is not None and custom.prompt.strip():
        lines.append(
            f"You are the user's {custom.name} helper. Its instructions:\n{custom.prompt.strip()}"
        )
    if "UpdateCurrentStep" in offered(Mode.SUBAGENT, context.switches):
        lines.append(SUBAGENT_PROGRESS_NOTE)
    return "\n".join(lines)


MCP_META_NOTE = """\
MCP servers of the user. Their tools are not in your tool list: reach them through the MCP \
tools you have, naming a server by its identifier and a tool by its name."""

MCP_META_LOOKUP = """\
Look a tool up with GetMcpTools (its description and argument schema) before the first \
CallMcpTool of it."""


MCP_META_SCHEMAS = """\
Each tool's description and argument schema follow its server."""


def _mcp_server_lines(servers: tuple[McpServerInfo, ...], detailed: bool) -> list[str]:
    """One entry per server, in the context's (already stable) order: name, identifier, tool
    names, then the server's own instructions indented under it; `detailed` adds each tool's
    description and JSON Schema (keys sorted)."""
    lines: list[str] = []
    for server in servers:
        name = server.name or server.identifier
        tools = ", ".join(t.name for t in server.tools) or "(no tools listed)"
        lines.append(f"- {name} (server identifier: {server.identifier}). Tools: {tools}")
        instructions = server.instructions.strip()
        if instructions:
            lines.extend("  " + line for line in instructions.splitlines())
        if detailed:
            for tool in server.tools:
                schema = json.dumps(tool.parameters or {"type": "object"}, sort_keys=True)
                about = " ".join(tool.description.split()) or "(no description)"
                lines.append(f"  - {tool.name}: {about} Arguments: {schema}")
    return lines


def _mcp_section(context: TurnContext) -> str | None:
    if not context.mcp_meta or not context.mcp_servers:
        return None
    names = offered(mode_of(context.mode), context.switches)
    if "CallMcpTool" not in names:
        return None
    # Without GetMcpTools (plan, debug, multitask) nothing else gives the model a tool's
    # arguments, so the list carries them.
    lookup = "GetMcpTools" in names
    head = MCP_META_NOTE + " " + (MCP_META_LOOKUP if lookup else MCP_META_SCHEMAS)
    return head + "\n" + "\n".join(_mcp_server_lines(context.mcp_servers, not lookup))


def turn_context(input: Input | None, state: ConversationState) -> TurnContext:
    """The context a request of this turn is built from: a Start's own, else the stored one."""
    if isinstance(input, Start):
        return start_context(input, state)
    return state.context if state.context is not None else DEFAULT_CONTEXT


def _environment_lines(env: Environment) -> list[str]:
    lines: list[str] = []
    if env.os:
        lines.append(f"- Operating system: {env.os}")
    if env.shell:
        lines.append(f"- Shell: {env.shell}")
    if env.workspace_paths:
        lines.append("- Workspace folders: " + ", ".join(env.workspace_paths))
    if env.cwd:
        lines.append(f"- Current directory: {env.cwd}")
    if env.time_zone:
        lines.append(f"- Time zone: {env.time_zone}")
    return lines


def rules_section(context: TurnContext) -> str:
    """The system prompt's section of user and project rules; "" when there are none (the
    context meter counts it as its own category)."""
    rules = [r.strip() for r in context.rules if r.strip()]
    if not rules:
        return ""
    return "Rules from the user and the project (follow them):\n\n" + "\n\n".join(rules)


def skills_section(context: TurnContext) -> str:
    """The system prompt's section of the skills the client offers (each a line naming its
    file); "" when there are none. The context meter counts it as its own category."""
    skills = [s.strip() for s in context.skills if s.strip()]
    if not skills:
        return ""
    return "Skills available here (read a skill's file before you follow it):\n\n" + "\n\n".join(
        skills
    )


def mcp_section(context: TurnContext) -> str:
    """The system prompt's list of the MCP servers the meta-tools reach; "" without them."""
    return _mcp_section(context) or ""


def render_prompt(context: TurnContext) -> str:
    """The system prompt for `context`; the same context always gives the same text (rendered
    once per context object: memo.py)."""
    return _prompts(context)


def _render_prompt(context: TurnContext) -> str:
    sections = [BASE_INSTRUCTIONS]
    subagent = _subagent_section(context)
    if subagent:
        sections.append(subagent)
    if context.read_only:
        sections.append(READ_ONLY_NOTE.format(mode=context.mode))
        if mode_of(context.mode) is Mode.ASK:
            sections.append(ASK_NOTE)
        if context.mode == "plan":
            sections.append(PLAN_NOTE)
    debug = _debug_section(context)
    if debug:
        sections.append(debug)
    env_lines = _environment_lines(context.environment)
    if env_lines:
        sections.append("Environment:\n" + "\n".join(env_lines))
    if context.git:
        sections.append("Git repository:\n" + context.git.strip())
    rules = rules_section(context)
    if rules:
        sections.append(rules)
    skills = skills_section(context)
    if skills:
        sections.append(skills)
    mcp = _mcp_section(context)
    if mcp:
        sections.append(mcp)
    if context.custom_instructions and context.custom_instructions.strip():
        sections.append("Additional instructions:\n" + context.custom_instructions.strip())
    return "\n\n".join(sections)


def _definition(name: str, context: TurnContext) -> ToolDefinition:
    if name == TASK.name:  # its model choices are the client's list (the same every turn)
        models = tuple(m.name for m in context.subagents.models)
        custom = tuple((a.name, a.description) for a in context.subagents.custom)
        return ToolDefinition(
            name=TASK.name,
            description=TASK.description,
            parameters=task_parameters(models, custom=custom),
        )
    return NATIVE_BY_NAME[name].definition


def render_tools(context: TurnContext) -> tuple[ToolDefinition, ...]:
    """`_render_tools`, once per context object (memo.py): the same tuple every time."""
    return _tools(context)


def _render_tools(context: TurnContext) -> tuple[ToolDefinition, ...]:
    """The mode's native tools in catalogue order (catalogue.offered), then the MCP tools sorted
    by name, in every mode (the real Cursor does not withhold them in ask or plan). With the
    MCP meta-tools on (`context.mcp_meta`) the flat MCP tools are left out: the meta-tools
    reach them.

    An MCP tool whose name is already taken (by a native tool or an earlier MCP tool of the same
    name) is left out, so names stay unique.
    """
    names = offered(mode_of(context.mode), context.switches)
    custom = agent_of(context) if mode_of(context.mode) is Mode.SUBAGENT else None
    if custom is not None:  # a custom helper runs with its own tool list
        names = allowed_tools(custom, names)
    out = [_definition(name, context) for name in names]
    if context.mcp_meta:
        return tuple(out)
    taken = set(NATIVE_BY_NAME)
    for tool in sorted(context.mcp_tools, key=lambda t: t.name):
        if tool.name in taken:
            continue
        taken.add(tool.name)
        out.append(tool)
    return tuple(out)


_prompts: ByIdentity[TurnContext, str] = ByIdentity(_render_prompt)


def _tools_key(context: TurnContext) -> object:
    """What `_render_tools` reads of a context, when it is small: every run decodes a new
    context, and equal ones share one tool tuple (so the schemas' encodings and sizes, kept by
    that tuple's identity in the meter, compaction and adapters, are computed once per
    process, not once per run). MCP tools carry schemas (dicts): no shared tuple for those."""
    if context.mcp_tools:
        return None
    return (context.mode, context.switches, context.subagents)


_shared_tools: ByValue[TurnContext, tuple[ToolDefinition, ...]] = ByValue(_render_tools, _tools_key)
_tools: ByIdentity[TurnContext, tuple[ToolDefinition, ...]] = ByIdentity(_shared_tools)


def build_prompt(input: Input | None, state: ConversationState) -> str:
    return render_prompt(turn_context(input, state))


def build_tools(input: Input | None, state: ConversationState) -> tuple[ToolDefinition, ...]:
    return render_tools(turn_context(input, state))
