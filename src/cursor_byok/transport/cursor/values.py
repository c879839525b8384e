"""Native values the dialect hands to the runtime. No protobuf in any of them.

`RunRequest` is a decoded run request. `Inbound` is what one client message turned out to be
once the dialect decoded it and matched it to what it answers (`ClientLink.receive`): a closed
union the runtime dispatches on, exhaustively.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ...llm.types import Message, ToolResultMessage, UserMessage
from ...loop.inputs import PlanBuild, ToolEffect
from ...loop.todos import TodoItem
from ...web.types import ServerJob
from .children import ChildSignals
from .context import ClientContext, PartKind
from .mcp import McpDefinition


class RunAction(enum.StrEnum):
    """Which `ConversationAction` started the run; the value is the action's field name."""

    USER_MESSAGE = "user_message_action"  # a new turn
    RESUME = "resume_action"  # continue the conversation's turn where it stands
    CANCEL = "cancel_action"
    SUMMARIZE = "summarize_action"
    SHELL_COMMAND = "shell_command_action"
    START_PLAN = "start_plan_action"
    EXECUTE_PLAN = "execute_plan_action"
    ASK_QUESTION_COMPLETION = "async_ask_question_completion_action"
    CANCEL_SUBAGENT = "cancel_subagent_action"
    BACKGROUND_TASK_COMPLETION = "background_task_completion_action"
    BACKGROUND_SHELL = "background_shell_action"
    BACKGROUND_SUBAGENT = "background_subagent_action"
    SUBSCRIPTION_NOTIFICATION = "subscription_notification_action"
    GOAL_CONTINUATION = "goal_continuation_action"
    INJECT_CONTEXT = "inject_context_action"
    # A variant this server's schema does not know (a newer IDE's): an empty turn, logged.
    UNKNOWN = "unknown_action"


# -- what an action other than a user message carries ---------------------------------------


@dataclass(frozen=True, slots=True)
class ShellCommandRun:
    """The user ran a `!` command in the chat (shell_command_action)."""

    command: str
    exec_id: str = ""


@dataclass(frozen=True, slots=True)
class StartPlan:
    """start_plan_action: the run's user message is in RunRequest.user_message."""

    is_spec: bool = False


@dataclass(frozen=True, slots=True)
class ExecutePlan:
    """execute_plan_action (the Build button): the plan and the mode to build it in."""

    plan_text: str = ""  # plan_file_content, else plan.plan
    plan_file_uri: str = ""
    plan_file_path: str = ""
    plan_id: str = ""
    execution_mode: str = "agent"  # absent: agent
    kickoff_message_id: str = ""


@dataclass(frozen=True, slots=True)
class AskQuestionCompletion:
    """async_ask_question_completion_action: late answers to an AskQuestion call."""

    original_tool_call_id: str
    original_args: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CancelSubagent:
    subagent_id: str


class BackgroundTaskKind(enum.StrEnum):
    UNSPECIFIED = "unspecified"
    SHELL = "shell"
    SUBAGENT = "subagent"


class BackgroundTaskStatus(enum.StrEnum):
    UNSPECIFIED = "unspecified"
    SUCCESS = "success"
    ERROR = "error"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class BackgroundCompletion:
    task_id: str
    kind: BackgroundTaskKind
    status: BackgroundTaskStatus
    finished: bool  # reason TASK_FINISHED (False: a progress note)
    title: str = ""
    detail: str = ""
    output_path: str = ""
    subagent_id: str = ""
    tool_call_id: str = ""


@dataclass(frozen=True, slots=True)
class BackgroundCompletions:
    completions: tuple[BackgroundCompletion, ...] = ()


@dataclass(frozen=True, slots=True)
class MovedToBackground:
    """background_shell_action / background_subagent_action: the user backgrounded a call."""

    tool_call_id: str


@dataclass(frozen=True, slots=True)
class Notifications:
    """subscription_notification_action."""

    messages: tuple[UserMessage, ...] = ()


@dataclass(frozen=True, slots=True)
class GoalContinuation:
    pass


@dataclass(frozen=True, slots=True)
class InjectContext:
    """inject_context_action: a message (the user's, or a producer's system context, written
    as a user message) for the model to read."""

    message: UserMessage
    injection_id: str = ""
    expected_run_id: str = ""


@dataclass(frozen=True, slots=True)
class UnknownAction:
    """A ConversationAction variant this server's schema lacks: its field numbers, logged."""

    field_numbers: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CancelTurn:
    """cancel_action as the first action of a run."""

    reason: str = ""


ActionPayload: TypeAlias = (
    ShellCommandRun
    | StartPlan
    | ExecutePlan
    | AskQuestionCompletion
    | CancelSubagent
    | BackgroundCompletions
    | MovedToBackground
    | Notifications
    | GoalContinuation
    | InjectContext
    | UnknownAction
    | CancelTurn
)


@dataclass(frozen=True, slots=True)
class ContextRef:
    """A `request_context_parts` blob to fetch with get_blob_args."""

    kind: PartKind  # which field referenced it, so which message it holds
    blob_id: bytes
    byte_length: int


@dataclass(frozen=True, slots=True)
class HistoryRefs:
    """Blob ids of the client's checkpoint (`conversation_state`), and its todo list (read
    only for a conversation this server does not know: ours wins)."""

    root_prompt_blob_ids: tuple[bytes, ...] = ()
    turn_blob_ids: tuple[bytes, ...] = ()
    todos: tuple[TodoItem, ...] = ()


@dataclass(frozen=True, slots=True)
class RunRequest:
    conversation_id: str
    model_id: str | None
    action: RunAction
    user_message: UserMessage | None
    mode: str
    inline_context: ClientContext | None
    context_refs: tuple[ContextRef, ...] = ()
    history: HistoryRefs = field(default_factory=HistoryRefs)
    inline_history: tuple[Message, ...] = ()
    mcp_tools: tuple[McpDefinition, ...] = ()
    # The client's own system prompt addition (AgentRunRequest.custom_system_prompt): it goes
    # into the turn's context as custom instructions, after our prompt and the rules.
    custom_system_prompt: str | None = None
    # Blobs the client sent along (AgentRunRequest.pre_fetched_blobs, 17): (id, bytes), so the
    # server need not ask for them; each is checked against its id before use.
    pre_fetched: tuple[tuple[bytes, bytes], ...] = ()
    # The reasoning effort `requested_model.parameters` asks for ("": none; model_params.py).
    effort: str = ""
    # The text the user typed (UserMessage.text), without the attachments decoded around it.
    user_text: str = ""
    # AgentRunRequest.suppress_subagent_progress_update_tool (22); None: not said.
    suppress_subagent_progress_update_tool: bool | None = None
    # What an action other than user_message/resume carries (None for those two).
    payload: ActionPayload | None = None
    # execute_plan_action (the IDE's Build button): the plan to carry out; `user_message` is
    # then None and `mode` is the action's execution_mode.
    build: PlanBuild | None = None
    # What the body says of a child run (children.py reads it with the headers).
    child: ChildSignals = field(default_factory=ChildSignals)
    # AgentRunRequest.selected_subagent_models (14): the model names Task may offer, in order.
    subagent_models: tuple[str, ...] = ()
    # AgentRunRequest.subagent_model_overrides (20): (type, model name, inherit, disabled).
    subagent_overrides: tuple[tuple[str, str, bool, bool], ...] = ()
    # The client checkpoint's helper fields (children.subagent_state): carried back unchanged.
    subagent_state: bytes = b""


# -- what one client message is, once matched ------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRequested:
    """A run_request (the first message of every run; a second one is a protocol error)."""

    request: RunRequest


@dataclass(frozen=True, slots=True)
class CancelRequested:
    reason: str


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A user message sent on a run that is already going."""

    message: UserMessage
    context: ClientContext | None = None
    mode: str | None = None
    # An inject_context_action's answer (context_injection_state), sent as it is taken in.
    acknowledge: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class ResumeRequested:
    pass


@dataclass(frozen=True, slots=True)
class InteractionAnswered:
    """The client's answer to an interaction query the server asked (`id`)."""

    id: int
    kind: str  # the InteractionResponse branch: "ask_question_interaction_response", ...
    fields: dict[str, Any]  # that branch as JSON-compatible values


@dataclass(frozen=True, slots=True)
class BlobReceived:
    """The answer to a get_blob request (`kv_id`); None when the client has no such blob.
    `error`: the client's `GetBlobResult.error` message, clipped (empty when it sent none)."""

    kv_id: int
    data: bytes | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class BlobStored:
    """The answer to a set_blob request (`kv_id`)."""

    kv_id: int
    ok: bool


@dataclass(frozen=True, slots=True)
class ContextReceived:
    """The answer to a request_context request (`exec_id`); None when it gave none."""

    exec_id: int
    context: ClientContext | None


@dataclass(frozen=True, slots=True)
class DefinitionRead:
    """The answer to the read of an MCP tool's definition file (`exec_id`): its text, or
    None and why it could not be read (mcp_files.py)."""

    exec_id: int
    text: str | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """The tool call `operation_id` goes on; `frames` are to be sent now. With
    `wake_after_ms` the call waits on a timer: call `ClientLink.wake_tool` that much later;
    with `job` on a server job."""

    operation_id: str
    frames: tuple[bytes, ...]
    wake_after_ms: int | None = None
    job: ServerJob | None = None  # run it on the server, then `ClientLink.deliver_job`


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """The tool call `operation_id` is over: `result` for the model, `card` for the client,
    `effect` for the loop (a saved plan, an approved mode switch)."""

    operation_id: str
    result: ToolResultMessage
    card: bytes
    effect: ToolEffect | None = None


@dataclass(frozen=True, slots=True)
class Stray:
    """A reply nobody waits for (a late answer, a message a tool machine did not take)."""

    kind: str
    detail: str


@dataclass(frozen=True, slots=True)
class ClientHeartbeat:
    pass


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """A client message this server does not handle (counted per kind, logged once)."""

    kind: str


@dataclass(frozen=True, slots=True)
class Malformed:
    """A client message that cannot be read; `error` says why."""

    error: str


Inbound: TypeAlias = (
    RunRequested
    | CancelRequested
    | FollowUp
    | ResumeRequested
    | InteractionAnswered
    | BlobReceived
    | BlobStored
    | ContextReceived
    | DefinitionRead
    | ToolProgress
    | ToolFinished
    | Stray
    | ClientHeartbeat
    | UnknownEvent
    | Malformed
)
