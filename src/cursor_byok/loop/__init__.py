"""The pure decision core: `transition(state, input) -> Transition`. No I/O, clock or randomness.

Public API (see docs/loop.md):

    state      RuntimeState, ConversationState, PendingResponse, AwaitLLM, AwaitClient, Status
    view       Span (the active history as a view over the append-only log)
    inputs     Start, LLMEvent, ToolResult, UserMessage (alias UserMessageInput), Cancel,
               Supersede, Resume (ToolOperation), ToolLost (LostCause), Rewind, Input; ToolEffect
               (PlanCreated, ModeSwitched) on a ToolResult; PlanBuild on a Start
    context    TurnContext, Environment, McpRoute, McpServerInfo, McpToolInfo
    commands   ContinueLLM, CallLLM, ResendLLM, CallClient, WaitInput, Final, Failed
               (FailureKind), Canceled, Command
    transition Transition (appended, local_results: LocalResult, call_end: CallEnd with
               CallOutcome), transition, LoopError
    functions  build_prompt, build_tools, render_prompt, render_tools, side_effects
"""

from .commands import (
    CallClient,
    CallLLM,
    Canceled,
    Command,
    ContinueLLM,
    Failed,
    FailureKind,
    Final,
    ResendLLM,
    WaitInput,
)
from .context import (
    DEFAULT_MAX_LLM_CALLS,
    READ_ONLY_MODES,
    Environment,
    McpRoute,
    McpServerInfo,
    McpToolInfo,
    TurnContext,
)
from .inputs import (
    Cancel,
    Input,
    LLMEvent,
    LostCause,
    ModeSwitched,
    Note,
    PlanBuild,
    PlanCreated,
    Resume,
    Rewind,
    Start,
    Supersede,
    ToolEffect,
    ToolLost,
    ToolOperation,
    ToolResult,
    UserMessage,
    UserMessageInput,
)
from .prompt import build_prompt, build_tools, render_prompt, render_tools
from .state import (
    BUSY,
    IDLE,
    AwaitClient,
    AwaitLLM,
    ConversationState,
    PendingResponse,
    PlanMark,
    PlanRecord,
    RuntimeState,
    Status,
    Waiting,
)
from .tools import NATIVE_TOOL_NAMES, NATIVE_TOOLS, ToolSpec, side_effects
from .transition import (
    CallEnd,
    CallOutcome,
    LocalResult,
    LoopError,
    Transition,
    transition,
)
from .view import WHOLE_LOG, Span

__all__ = [
    "BUSY",
    "DEFAULT_MAX_LLM_CALLS",
    "IDLE",
    "NATIVE_TOOLS",
    "NATIVE_TOOL_NAMES",
    "READ_ONLY_MODES",
    "WHOLE_LOG",
    "AwaitClient",
    "AwaitLLM",
    "CallClient",
    "CallEnd",
    "CallLLM",
    "CallOutcome",
    "Cancel",
    "Canceled",
    "Command",
    "ContinueLLM",
    "ConversationState",
    "Environment",
    "Failed",
    "FailureKind",
    "Final",
    "Input",
    "LLMEvent",
    "LocalResult",
    "LoopError",
    "LostCause",
    "McpRoute",
    "McpServerInfo",
    "McpToolInfo",
    "ModeSwitched",
    "Note",
    "PendingResponse",
    "PlanBuild",
    "PlanCreated",
    "PlanMark",
    "PlanRecord",
    "ResendLLM",
    "Resume",
    "Rewind",
    "RuntimeState",
    "Span",
    "Start",
    "Status",
    "Supersede",
    "ToolEffect",
    "ToolLost",
    "ToolOperation",
    "ToolResult",
    "ToolSpec",
    "Transition",
    "TurnContext",
    "UserMessage",
    "UserMessageInput",
    "WaitInput",
    "Waiting",
    "build_prompt",
    "build_tools",
    "render_prompt",
    "render_tools",
    "side_effects",
    "transition",
]
