"""Client messages (`agent.v1.AgentClientMessage`) → native values. Pure code: no I/O, no state.

`decode_client_message` returns what the message is: a native value the runtime handles (a run
request, a cancel, a follow-up, an interaction answer, ...), or, for replies to what the server
asked (exec and KV replies), an internal `ExecReply` / `ExecControl` / `KvReply` that
`ClientLink` matches to its request and turns into a native value. Nothing decoded here leaves
the dialect as protobuf. docs/dialect.md has the tables.

The dialect translates; it never decides, never edits history, never runs tools and never
stores loop state (design §9).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]

from ...llm.types import TextContent
from ...llm.types import UserMessage as LlmUserMessage
from ...loop.inputs import PlanBuild
from .background import background_shell_notice, completion_notice
from .children import child_signals, subagent_state
from .context import PartKind, decode_request_context, mcp_definition
from .history import DialectError, history_from_conversation_history
from .injections import (
    inject_context,
    injected_follow_up,
    notifications,
    notifications_message,
    unknown_action,
)
from .model_params import requested_effort
from .proto import agent_pb2
from .tools.queries import answers_text
from .tools.todos import decode_todo
from .user_message import decode_user_message, mode_name
from .values import (
    ActionPayload,
    AskQuestionCompletion,
    BackgroundCompletion,
    BackgroundCompletions,
    BackgroundTaskKind,
    BackgroundTaskStatus,
    CancelRequested,
    CancelSubagent,
    CancelTurn,
    ClientHeartbeat,
    ContextRef,
    ExecutePlan,
    FollowUp,
    GoalContinuation,
    HistoryRefs,
    InjectContext,
    InteractionAnswered,
    MovedToBackground,
    Notifications,
    ResumeRequested,
    RunAction,
    RunRequest,
    RunRequested,
    ShellCommandRun,
    StartPlan,
    UnknownEvent,
)

__all__ = [
    "EMPTY_BLOB_ID",
    "Decoded",
    "DialectError",
    "ExecControl",
    "ExecReply",
    "KvReply",
    "decode_client_message",
    "decode_run_request",
    "decode_user_message",
    "mode_name",
]

EMPTY_BLOB_ID = hashlib.sha256(b"").digest()


# -- replies to what the server asked (matched by ClientLink) ---------------------------------


@dataclass(frozen=True, slots=True)
class ExecReply:
    id: int
    message: agent_pb2.ExecClientMessage


@dataclass(frozen=True, slots=True)
class ExecControl:
    id: int
    kind: str  # "stream_close" | "throw" | "heartbeat"
    message: agent_pb2.ExecClientControlMessage
    error: str | None = None


@dataclass(frozen=True, slots=True)
class KvReply:
    id: int
    message: agent_pb2.KvClientMessage


Decoded: TypeAlias = (
    RunRequested
    | CancelRequested
    | FollowUp
    | ResumeRequested
    | InteractionAnswered
    | ClientHeartbeat
    | UnknownEvent
    | ExecReply
    | ExecControl
    | KvReply
)


# -- decoding ---------------------------------------------------------------------------------


def _context_refs(parts: agent_pb2.RequestContextParts) -> tuple[ContextRef, ...]:
    refs: list[ContextRef] = []
    for kind, bid, length in (
        (PartKind.RULES, parts.rules_blob_id, parts.rules_byte_length),
        (PartKind.SKILLS, parts.skills_blob_id, parts.skills_byte_length),
        (PartKind.SUBAGENTS, parts.subagents_blob_id, parts.subagents_byte_length),
        (PartKind.MCPS, parts.mcps_blob_id, parts.mcps_byte_length),
    ):
        if bid and bid != EMPTY_BLOB_ID:
            refs.append(ContextRef(kind=kind, blob_id=bytes(bid), byte_length=int(length)))
    return tuple(refs)


def _model_id(req: agent_pb2.AgentRunRequest) -> str | None:
    if req.HasField("requested_model") and req.requested_model.model_id:
        return str(req.requested_model.model_id)
    if req.HasField("model_details") and req.model_details.model_id:
        return str(req.model_details.model_id)
    return None


def _payload(action: agent_pb2.ConversationAction, kind: str) -> ActionPayload | None:
    """The native value of an action other than user_message/resume (None for those)."""
    match kind:
        case "cancel_action":
            return CancelTurn(reason=action.cancel_action.reason)
        case "summarize_action":
            return None
        case "shell_command_action":
            sca = action.shell_command_action
            return ShellCommandRun(command=sca.shell_command.command, exec_id=sca.exec_id)
        case "start_plan_action":
            return StartPlan(is_spec=action.start_plan_action.is_spec)
        case "execute_plan_action":
            epa = action.execute_plan_action
            text = epa.plan_file_content if epa.HasField("plan_file_content") else ""
            if not text and epa.HasField("plan"):
                text = epa.plan.plan
            return ExecutePlan(
                plan_text=text,
                plan_file_uri=epa.plan_file_uri,
                plan_file_path=epa.plan_file_path,
                plan_id=epa.plan_id,
                execution_mode=(
                    mode_name(epa.execution_mode) if epa.HasField("execution_mode") else "agent"
                ),
                kickoff_message_id=epa.kickoff_message_id,
            )
        case "async_ask_question_completion_action":
            aq = action.async_ask_question_completion_action
            return AskQuestionCompletion(
                original_tool_call_id=aq.original_tool_call_id,
                original_args=json_format.MessageToDict(
                    aq.original_args, preserving_proto_field_name=True
                ),
                result=json_format.MessageToDict(aq.result, preserving_proto_field_name=True),
            )
        case "cancel_subagent_action":
            return CancelSubagent(subagent_id=action.cancel_subagent_action.subagent_id)
        case "background_task_completion_action":
            return BackgroundCompletions(
                completions=tuple(
                    _completion(c) for c in action.background_task_completion_action.completions
                )
            )
        case "background_shell_action":
            return MovedToBackground(tool_call_id=action.background_shell_action.tool_call_id)
        case "background_subagent_action":
            return MovedToBackground(tool_call_id=action.background_subagent_action.tool_call_id)
        case "subscription_notification_action":
            return notifications(action.subscription_notification_action)
        case "goal_continuation_action":
            return GoalContinuation()
        case "inject_context_action":
            return inject_context(action.inject_context_action)
        case "unknown_action":
            return unknown_action(action)
    raise DialectError(f"the action {kind} is not known to this server")


_TASK_KINDS = {
    agent_pb2.BACKGROUND_TASK_KIND_SHELL: BackgroundTaskKind.SHELL,
    agent_pb2.BACKGROUND_TASK_KIND_SUBAGENT: BackgroundTaskKind.SUBAGENT,
}
_TASK_STATUSES = {
    agent_pb2.BACKGROUND_TASK_STATUS_SUCCESS: BackgroundTaskStatus.SUCCESS,
    agent_pb2.BACKGROUND_TASK_STATUS_ERROR: BackgroundTaskStatus.ERROR,
    agent_pb2.BACKGROUND_TASK_STATUS_ABORTED: BackgroundTaskStatus.ABORTED,
}


def _completion(c: agent_pb2.BackgroundTaskCompletion) -> BackgroundCompletion:
    return BackgroundCompletion(
        task_id=c.task_id,
        kind=_TASK_KINDS.get(c.kind, BackgroundTaskKind.UNSPECIFIED),
        status=_TASK_STATUSES.get(c.status, BackgroundTaskStatus.UNSPECIFIED),
        finished=c.reason != agent_pb2.BACKGROUND_TASK_COMPLETION_REASON_TASK_PROGRESS,
        title=c.title,
        detail=c.detail,
        output_path=c.output_path,
        subagent_id=c.subagent_id,
        tool_call_id=c.tool_call_id,
    )


def _action_context(
    action: agent_pb2.ConversationAction, kind: str
) -> agent_pb2.RequestContext | None:
    """The inline RequestContext an action carries itself, if any."""
    match kind:
        case "user_message_action":
            owner: Any = action.user_message_action
        case "resume_action":
            owner = action.resume_action
        case "start_plan_action":
            owner = action.start_plan_action
        case "execute_plan_action":
            owner = action.execute_plan_action
        case "subscription_notification_action":
            owner = action.subscription_notification_action
        case "inject_context_action" if action.inject_context_action.HasField("user_context"):
            owner = action.inject_context_action.user_context
        case _:
            return None
    return owner.request_context if owner.HasField("request_context") else None


def decode_run_request(req: agent_pb2.AgentRunRequest) -> RunRequest:
    """A run request, whatever its action: every ConversationAction variant decodes (a variant
    the runtime does not serve yet is its own RunAction, never a decoding error)."""
    conversation_id, action, kind = _conversation_action(req)
    state = req.conversation_state
    history = _history_refs(state)
    parts = action.request_context_parts if action.HasField("request_context_parts") else None
    refs = _context_refs(parts) if parts is not None else ()
    dynamic = (
        parts.dynamic_context if parts is not None and parts.HasField("dynamic_context") else None
    )
    own = _action_context(action, kind)
    inline = own if own is not None else dynamic
    said = _action_message(req, action, kind)
    um, notice = said.message, said.notice
    request = RunRequest(
        conversation_id=conversation_id,
        model_id=_model_id(req),
        action=RunAction(kind),
        user_message=decode_user_message(um) if um is not None else notice,
        mode=said.mode,
        inline_context=decode_request_context(inline) if inline is not None else None,
        context_refs=refs,
        history=history,
        inline_history=said.inline_history,
        mcp_tools=tuple(mcp_definition(d) for d in req.mcp_tools.mcp_tools),
        custom_system_prompt=req.custom_system_prompt
        if req.HasField("custom_system_prompt")
        else None,
        pre_fetched=tuple((bytes(b.id), bytes(b.value)) for b in req.pre_fetched_blobs),
        effort=requested_effort(req.requested_model.parameters)
        if req.HasField("requested_model")
        else "",
        user_text=um.text if um is not None else (notice.text if notice is not None else ""),
        suppress_subagent_progress_update_tool=(
            req.suppress_subagent_progress_update_tool
            if req.HasField("suppress_subagent_progress_update_tool")
            else None
        ),
        payload=said.payload,
        child=child_signals(req),
        subagent_state=subagent_state(state),
        subagent_models=tuple(m.model_id for m in req.selected_subagent_models if m.model_id),
        subagent_overrides=_subagent_overrides(req),
    )
    if kind in ("start_plan_action", "execute_plan_action", "async_ask_question_completion_action"):
        return _plan_or_answers(req, action, request)
    return request


def _conversation_action(
    req: agent_pb2.AgentRunRequest,
) -> tuple[str, agent_pb2.ConversationAction, str]:
    """The conversation id, the action and the action's kind, each required."""
    conversation_id = req.conversation_id if req.HasField("conversation_id") else ""
    if not conversation_id:
        raise DialectError("the run_request has no conversation_id; the client must send one")
    if not req.HasField("action"):
        raise DialectError("the run_request has no action (expected user_message_action)")
    action = req.action
    kind = action.WhichOneof("action")
    if kind is None:
        # A variant newer than this schema (its field is unknown here) or none at all: either
        # way an empty turn, never invalid_argument (cursor-native-tools §6.1).
        kind = RunAction.UNKNOWN.value
    return conversation_id, action, kind


def _history_refs(state: agent_pb2.ConversationStateStructure) -> HistoryRefs:
    """The blob ids of the client's stored history, and its todos."""
    return HistoryRefs(
        root_prompt_blob_ids=tuple(bytes(b) for b in state.root_prompt_messages_json),
        turn_blob_ids=tuple(bytes(b) for b in state.turns),
        todos=tuple(t for t in (decode_todo(bytes(b)) for b in state.todos) if t is not None),
    )


@dataclass(frozen=True, slots=True)
class _ActionMessage:
    """What an action says: the user's message (or a notice standing for one), the mode it
    runs in, its payload and the history it carries inline."""

    message: agent_pb2.UserMessage | None
    notice: LlmUserMessage | None
    mode: str
    payload: ActionPayload | None
    inline_history: tuple[Any, ...]


def _action_message(
    req: agent_pb2.AgentRunRequest, action: agent_pb2.ConversationAction, kind: str
) -> _ActionMessage:
    state = req.conversation_state
    state_mode = mode_name(state.mode) if state.HasField("mode") else "agent"
    subagent = req.HasField("subagent_type_name") and bool(req.subagent_type_name)
    um: agent_pb2.UserMessage | None = None
    mode = state_mode
    payload: ActionPayload | None = None
    inline_history: tuple[Any, ...] = ()
    if kind == "user_message_action":
        uma = action.user_message_action
        if not uma.HasField("user_message"):
            raise DialectError("the user_message_action carries no user_message")
        um = uma.user_message
        if uma.HasField("conversation_history"):
            inline_history = history_from_conversation_history(uma.conversation_history)
    elif kind != "resume_action":
        payload = _payload(action, kind)
        if kind == "start_plan_action":
            spa = action.start_plan_action
            um = spa.user_message if spa.HasField("user_message") else None
            mode = "plan"
        elif isinstance(payload, ExecutePlan):
            mode = payload.execution_mode
    notice: LlmUserMessage | None = None
    if kind == "background_shell_action":
        notice = background_shell_notice(action.background_shell_action)
    elif kind == "background_task_completion_action":
        notice = completion_notice(action.background_task_completion_action)
    elif isinstance(payload, Notifications):
        notice = notifications_message(payload)
    elif isinstance(payload, InjectContext) and payload.message.content:
        notice = payload.message
    if um is not None:
        if not um.text and um.HasField("text_blob_id"):
            raise DialectError(
                "the user message text is only referenced by blob (text_blob_id); this server "
                "needs it inline in UserMessage.text"
            )
        if kind == "user_message_action" and um.mode:
            mode = mode_name(um.mode)
    if subagent:
        mode = "subagent"
    return _ActionMessage(um, notice, mode, payload, inline_history)


def _subagent_overrides(
    req: agent_pb2.AgentRunRequest,
) -> tuple[tuple[str, str, bool, bool], ...]:
    """Per subagent type: (type, model id, inherit, disabled), from the client's overrides."""
    return tuple(
        (
            o.subagent_type,
            o.model.model_id if o.WhichOneof("selection") == "model" else "",
            o.WhichOneof("selection") == "inherit" and o.inherit,
            o.WhichOneof("selection") == "disabled" and o.disabled,
        )
        for o in req.subagent_model_overrides
    )


def _plan_or_answers(
    req: agent_pb2.AgentRunRequest, action: agent_pb2.ConversationAction, base: RunRequest
) -> RunRequest:
    """The run requests of the plan and question flows (reference §3.1, §3.2), each a new turn.

    - start_plan_action: the user's message, in plan mode.
    - execute_plan_action (Build): no user message; the plan (the IDE's file content, else its
      `plan`) and the mode `execution_mode` names, agent when absent.
    - async_ask_question_completion_action: the late answers as the user's message [U: what
      the IDE expects; the original call already has its "answers come later" result]."""
    kind = action.WhichOneof("action")
    if kind == "start_plan_action":
        spa = action.start_plan_action
        if not spa.HasField("user_message"):
            raise DialectError("the start_plan_action carries no user_message")
        um = spa.user_message
        inline = spa.request_context if spa.HasField("request_context") else None
        return replace(
            base,
            user_message=decode_user_message(um),
            mode="plan",
            inline_context=(
                decode_request_context(inline) if inline is not None else base.inline_context
            ),
            user_text=um.text,
        )
    if kind == "execute_plan_action":
        epa = action.execute_plan_action
        plan = epa.plan_file_content if epa.HasField("plan_file_content") else ""
        if not plan.strip() and epa.HasField("plan"):
            plan = epa.plan.plan
        uri = epa.plan_file_uri if epa.HasField("plan_file_uri") else ""
        if not uri and epa.HasField("plan_file_path"):
            uri = epa.plan_file_path
        mode = "agent"
        if epa.HasField("execution_mode") and epa.execution_mode:
            mode = mode_name(epa.execution_mode)
        inline = epa.request_context if epa.HasField("request_context") else None
        return replace(
            base,
            mode=mode,
            inline_context=(
                decode_request_context(inline) if inline is not None else base.inline_context
            ),
            build=PlanBuild(plan=plan, uri=uri),
            user_text="Build the plan",
        )
    done = action.async_ask_question_completion_action
    text = f"(The answers to the questions of AskQuestion call {done.original_tool_call_id})\n"
    match done.result.WhichOneof("result"):
        case "success":
            text += answers_text(done.original_args, done.result.success)
        case "rejected":
            text += f"The user declined to answer: {done.result.rejected.reason or 'no reason'}"
        case "error":
            text += f"The question form failed: {done.result.error.error_message or 'no reason'}"
        case _:
            text += "The question form closed without answers."
    message = LlmUserMessage(content=(TextContent(text=text),))
    return replace(base, user_message=message, user_text=text)


def _follow_up(action: agent_pb2.ConversationAction) -> FollowUp:
    uma = action.user_message_action
    if not uma.HasField("user_message"):
        raise DialectError("the user_message_action carries no user_message")
    context = uma.request_context if uma.HasField("request_context") else None
    if context is None and action.HasField("request_context_parts"):
        p = action.request_context_parts
        context = p.dynamic_context if p.HasField("dynamic_context") else None
    um = uma.user_message
    return FollowUp(
        message=decode_user_message(um),
        context=decode_request_context(context) if context is not None else None,
        mode=mode_name(um.mode) if um.mode else None,
    )


def _control(control: agent_pb2.ExecClientControlMessage) -> ExecControl:
    which = control.WhichOneof("message")
    if which == "stream_close":
        return ExecControl(id=control.stream_close.id, kind=which, message=control)
    if which == "heartbeat":
        return ExecControl(id=control.heartbeat.id, kind=which, message=control)
    if which == "throw":
        t = control.throw
        error = t.error or "unknown error"
        if t.HasField("error_code") and t.error_code:
            error = f"{error} ({t.error_code})"
        return ExecControl(id=t.id, kind=which, message=control, error=error)
    raise DialectError("an exec_client_control_message carries no message")


def _answer(response: agent_pb2.InteractionResponse) -> InteractionAnswered:
    kind = response.WhichOneof("result")
    fields: dict[str, Any] = {}
    if kind is not None:
        fields = json_format.MessageToDict(
            getattr(response, kind), preserving_proto_field_name=True
        )
    return InteractionAnswered(id=response.id, kind=kind or "empty", fields=fields)


def decode_client_message(msg: agent_pb2.AgentClientMessage) -> Decoded:
    """What `msg` is. Raises DialectError for a message that cannot be read."""
    kind = msg.WhichOneof("message")
    match kind:
        case "run_request":
            return RunRequested(decode_run_request(msg.run_request))
        case "exec_client_message":
            return ExecReply(id=msg.exec_client_message.id, message=msg.exec_client_message)
        case "exec_client_control_message":
            return _control(msg.exec_client_control_message)
        case "kv_client_message":
            return KvReply(id=msg.kv_client_message.id, message=msg.kv_client_message)
        case "conversation_action":
            action = msg.conversation_action
            which = action.WhichOneof("action")
            if which == "cancel_action":
                return CancelRequested(reason=action.cancel_action.reason)
            if which == "user_message_action":
                return _follow_up(action)
            if which == "resume_action":
                return ResumeRequested()
            if which == "background_task_completion_action":
                # On a run still going: the notice joins it like a follow-up message.
                return FollowUp(completion_notice(action.background_task_completion_action))
            if which == "inject_context_action":
                follow = injected_follow_up(action.inject_context_action)
                if follow.message.content:
                    return follow
            if which == "subscription_notification_action":
                notice = notifications_message(
                    notifications(action.subscription_notification_action)
                )
                if notice is not None:
                    return FollowUp(notice)
            return UnknownEvent(kind=f"conversation_action.{which or 'empty'}")
        case "interaction_response":
            return _answer(msg.interaction_response)
        case "client_heartbeat":
            return ClientHeartbeat()
        case "prewarm_request":
            return UnknownEvent(kind="prewarm_request")
        case None:
            raise DialectError("the client message is empty (no AgentClientMessage field set)")
        case _:
            return UnknownEvent(kind=str(kind))
