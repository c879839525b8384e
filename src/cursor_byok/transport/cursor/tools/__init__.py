"""Tool calls executed on the Cursor client: a sans-I/O state machine per call.

`machine_for` picks the call's machine by tool name. `start` gives tool_call_started and the
first exec request; `feed` takes each exec reply and answers `Send` (frames to send, the call
goes on), `Finished` (the result the model reads, and the tool_call_completed card without
which the IDE card spins) or `Ignored` (a message the call does not take). Frames are
serialized `AgentServerMessage`s. docs/dialect.md has the full mapping:

    Shell       shell_stream_args                 ToolCall.shell_tool_call     shell.py
    Read        read_args                         ToolCall.read_tool_call      files.py
    Write       write_args                        ToolCall.edit_tool_call      files.py
    StrReplace  read_args, then write_args        ToolCall.edit_tool_call      files.py
    Delete      delete_args                       ToolCall.delete_tool_call    files.py
    LS          ls_args                           ToolCall.ls_tool_call        files.py
    Grep        grep_args                         ToolCall.grep_tool_call      search.py
    Glob        grep_args (files_with_matches)    ToolCall.glob_tool_call      search.py
    AwaitShell  read_args of the terminal file    ToolCall.await_tool_call     await_shell.py
    TodoWrite   none (the loop answers it)        ToolCall.update_todos_tool_call  todos.py
    ReadLints   diagnostics_args, one per path    ToolCall.read_lints_tool_call lints.py
    EditNotebook read_args, then write_args       ToolCall.edit_tool_call      notebook.py
    MCP tools   mcp_args                          ToolCall.mcp_tool_call       mcp.py
    GetMcpTools none (the server answers)         ToolCall.get_mcp_tools_tool_call mcp_meta.py
    CallMcpTool mcp_args (server_identifier)      ToolCall.mcp_tool_call       mcp_meta.py
    FetchMcpResource read_mcp_resource_exec_args  ToolCall.read_mcp_resource_tool_call
    ListMcpResources list_mcp_resources_exec_args ToolCall.list_mcp_resources_tool_call
    CreatePlan  query create_plan_request_query   ToolCall.create_plan_tool_call   queries.py
    AskQuestion query ask_question_interaction_query  ToolCall.ask_question_tool_call
    SwitchMode  query switch_mode_request_query   ToolCall.switch_mode_tool_call   queries.py
    WebSearch   query web_search_request_query, then a server job
                                                  ToolCall.web_search_tool_call    web_search.py
    WebFetch    query web_fetch_request_query, then fetch_args  ToolCall.web_fetch_tool_call web.py
    GenerateImage query generate_image_request_query, a server job, then write_args
                                                  ToolCall.generate_image_tool_call  web.py
    Task        subagent_args                     ToolCall.task_tool_call      subagents.py
    UpdateCurrentStep none (the server answers)   ToolCall.communicate_update_tool_call
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ....llm.types import ToolCall
from ....loop.context import Subagents
from ....loop.tools import NATIVE_TOOL_NAMES
from ....web.page_text import DEFAULT_MAX_TEXT_CHARS
from ..mcp import McpDirectory, McpTool
from ..proto import agent_pb2
from .await_shell import AwaitShellMachine
from .cards import sanitize_tool_call_id
from .files import DeleteMachine, LsMachine, ReadMachine, StrReplaceMachine, WriteMachine
from .format import MAX_RESULT_CHARS, clip_middle, format_grep, format_ls, format_read, format_shell
from .lints import ReadLintsMachine
from .machine import (
    DEFAULT_BLOCK_UNTIL_MS,
    Finished,
    Ignored,
    Phase,
    Send,
    Started,
    Step,
    ToolMachine,
    ToolSettings,
)
from .mcp import McpMachine
from .mcp_meta import (
    CallMcpToolMachine,
    FetchMcpResourceMachine,
    GetMcpToolsMachine,
    ListMcpResourcesMachine,
)
from .notebook import EditNotebookMachine
from .queries import AskQuestionMachine, CreatePlanMachine, QueryMachine, SwitchModeMachine
from .search import GlobMachine, GrepMachine
from .shell import ShellMachine
from .stdin import WriteShellStdinMachine
from .subagents import TaskMachine, UpdateCurrentStepMachine
from .todos import TodoWriteMachine, decode_todo, todo_items
from .web import GenerateImageMachine, WebFetchMachine
from .web_search import WebSearchMachine

__all__ = [
    "DEFAULT_BLOCK_UNTIL_MS",
    "MAX_RESULT_CHARS",
    "NATIVE_MACHINES",
    "Finished",
    "Ignored",
    "McpMachine",
    "Phase",
    "QueryMachine",
    "Send",
    "Started",
    "Step",
    "TodoWriteMachine",
    "ToolMachine",
    "ToolSettings",
    "clip_middle",
    "decode_todo",
    "format_grep",
    "format_ls",
    "format_read",
    "format_shell",
    "machine_for",
    "placeholder_tool_call",
    "sanitize_tool_call_id",
    "todo_items",
]

# Native tool name → its machine, in the catalogue's order. Every other name is an MCP tool.
NATIVE_MACHINES: Mapping[str, type[ToolMachine]] = MappingProxyType(
    {
        "Shell": ShellMachine,
        "Read": ReadMachine,
        "Write": WriteMachine,
        "StrReplace": StrReplaceMachine,
        "Delete": DeleteMachine,
        "LS": LsMachine,
        "Grep": GrepMachine,
        "Glob": GlobMachine,
        "AwaitShell": AwaitShellMachine,
        "WriteShellStdin": WriteShellStdinMachine,
        "TodoWrite": TodoWriteMachine,
        "ReadLints": ReadLintsMachine,
        "EditNotebook": EditNotebookMachine,
        "CreatePlan": CreatePlanMachine,
        "AskQuestion": AskQuestionMachine,
        "SwitchMode": SwitchModeMachine,
        "Task": TaskMachine,
        "UpdateCurrentStep": UpdateCurrentStepMachine,
        "WebSearch": WebSearchMachine,
        "WebFetch": WebFetchMachine,
        "GenerateImage": GenerateImageMachine,
        "GetMcpTools": GetMcpToolsMachine,
        "CallMcpTool": CallMcpToolMachine,
        "FetchMcpResource": FetchMcpResourceMachine,
        "ListMcpResources": ListMcpResourcesMachine,
    }
)

if tuple(NATIVE_MACHINES) != NATIVE_TOOL_NAMES:
    raise ImportError(
        f"the tool machines {tuple(NATIVE_MACHINES)} do not match the native tool catalogue "
        f"{NATIVE_TOOL_NAMES}"
    )


def machine_for(
    call: ToolCall,
    *,
    call_id: str,
    model_call_id: str,
    conversation_id: str,
    mcp: McpTool | None = None,
    shell_block_ms: int = DEFAULT_BLOCK_UNTIL_MS,
    terminals_folder: str | None = None,
    budget_ms: int | None = None,
    vision: bool = False,
    mode: str = "agent",
    keep_stdin: bool = False,
    mcp_directory: McpDirectory | None = None,
    model: str = "",
    workspace_root: str | None = None,
    page_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    subagents: Subagents | None = None,
) -> ToolMachine:
    """The machine for one call. `mcp` is the route of an MCP tool (None when the name is not
    known: it goes out as it is); native tools ignore it. `terminals_folder` is the client's
    (RequestContextEnv.terminals_folder), `budget_ms` the runner's deadline for one call,
    `vision` whether the model sees images, `mode` the conversation's mode, `mcp_directory`
    the turn's MCP servers and routes (for the meta-tools), `model` the run's model id (a
    server job's per-model settings), `workspace_root` the client's first workspace folder,
    `page_text_chars` WebFetch's text limit."""
    settings = ToolSettings(
        conversation_id=conversation_id,
        shell_block_ms=shell_block_ms,
        terminals_folder=terminals_folder,
        budget_ms=budget_ms,
        vision=vision,
        mode=mode,
        keep_stdin=keep_stdin,
        mcp=mcp_directory if mcp_directory is not None else McpDirectory(),
        model=model,
        workspace_root=workspace_root,
        page_text_chars=page_text_chars,
        subagents=subagents if subagents is not None else Subagents(),
    )
    native = NATIVE_MACHINES.get(call.name)
    if native is None:
        return McpMachine(
            call, call_id=call_id, model_call_id=model_call_id, settings=settings, tool=mcp
        )
    return native(call, call_id=call_id, model_call_id=model_call_id, settings=settings)


def placeholder_tool_call(name: str, tool_call_id: str) -> agent_pb2.ToolCall:
    """The empty typed ToolCall the IDE draws a card for while the arguments stream."""
    return NATIVE_MACHINES.get(name, McpMachine).placeholder(name, tool_call_id)
