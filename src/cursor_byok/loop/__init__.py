"""The pure decision core: `transition(state, input) -> Transition`. No I/O, clock or randomness.

Public API (see docs/loop.md):

    state      RuntimeState, ConversationState, PendingResponse, AwaitLLM, AwaitClient, Status
    inputs     Start, LLMEvent, ToolResult, UserMessage (alias UserMessageInput), Cancel, Input
    context    TurnContext, Environment
    commands   ContinueLLM, CallLLM, CallClient, WaitInput, Final, Failed, Canceled, Command
    functions  transition, build_prompt, build_tools, side_effects
"""

from .commands import (
    CallClient,
    CallLLM,
    Canceled,
    Command,
    ContinueLLM,
    Failed,
    Final,
    WaitInput,
)
from .context import DEFAULT_MAX_LLM_CALLS, READ_ONLY_MODES, Environment, TurnContext
from .inputs import Cancel, Input, LLMEvent, Start, ToolResult, UserMessage, UserMessageInput
from .prompt import build_prompt, build_tools, render_prompt, render_tools
from .state import (
    AwaitClient,
    AwaitLLM,
    ConversationState,
    PendingResponse,
    RuntimeState,
    Status,
    Waiting,
)
from .tools import NATIVE_TOOL_NAMES, NATIVE_TOOLS, ToolSpec, side_effects
from .transition import Transition, transition

__all__ = [
    "DEFAULT_MAX_LLM_CALLS",
    "NATIVE_TOOLS",
    "NATIVE_TOOL_NAMES",
    "READ_ONLY_MODES",
    "AwaitClient",
    "AwaitLLM",
    "CallClient",
    "CallLLM",
    "Cancel",
    "Canceled",
    "Command",
    "ContinueLLM",
    "ConversationState",
    "Environment",
    "Failed",
    "Final",
    "Input",
    "LLMEvent",
    "PendingResponse",
    "RuntimeState",
    "Start",
    "Status",
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
