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

import base64
import hashlib
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]

from ...llm.types import ImageContent, TextContent, UserContent
from ...llm.types import UserMessage as LlmUserMessage
from ...loop.inputs import PlanBuild
from .context import decode_request_context, mcp_definition
from .history import DialectError, history_from_conversation_history
from .proto import agent_pb2
from .tools.queries import answers_text
from .values import (
    CancelRequested,
    ClientHeartbeat,
    ContextRef,
    FollowUp,
    HistoryRefs,
    InteractionAnswered,
    ResumeRequested,
    RunAction,
    RunRequest,
    RunRequested,
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


def mode_name(mode: int) -> str:
    """AgentMode → "agent", "ask", "plan", "debug", "multitask", ... (unspecified → "agent")."""
    if mode == agent_pb2.AGENT_MODE_UNSPECIFIED:
        return "agent"
    try:
        name = str(agent_pb2.AgentMode.Name(mode))
        return name.removeprefix("AGENT_MODE_").lower()
    except ValueError:
        return f"mode_{mode}"


def _selected_context_texts(sc: agent_pb2.SelectedContext) -> list[str]:
    """Attachments the user picked, as text the model reads with the message."""
    out: list[str] = []
    for f in sc.files:
        path = f.relative_path if f.HasField("relative_path") and f.relative_path else f.path
        out.append(f"Attached file {path}:\n```\n{f.content}\n```")
    for c in sc.code_selections:
        path = c.relative_path if c.HasField("relative_path") and c.relative_path else c.path
        out.append(f"Selected code from {path}:\n```\n{c.content}\n```")
    for text in sc.extra_context:
        if text.strip():
            out.append(text)
    if sc.HasField("invocation_context") and sc.invocation_context.HasField("ide_state"):
        visible = sc.invocation_context.ide_state.visible_files
        shown = []
        for vf in visible:
            path = (
                vf.relative_path if vf.HasField("relative_path") and vf.relative_path else vf.path
            )
            line = (
                f" (cursor at line {vf.cursor_position.line})"
                if vf.HasField("cursor_position")
                else ""
            )
            shown.append(f"- {path}{line}")
        if shown:
            out.append("Files open in the user's editor:\n" + "\n".join(shown))
    return out


def decode_user_message(um: agent_pb2.UserMessage) -> LlmUserMessage:
    """The user's text, attachments as text parts before it, and inline images after it.
    Images only available as a blob id or an upload reference are named, not loaded."""
    content: list[UserContent] = []
    notes: list[str] = []
    if um.HasField("selected_context"):
        for text in _selected_context_texts(um.selected_context):
            content.append(TextContent(text=text))
    text = um.text
    if text or not um.HasField("text_blob_id"):
        content.append(TextContent(text=text))
    images: list[ImageContent] = []
    if um.HasField("selected_context"):
        for img in um.selected_context.selected_images:
            which = img.WhichOneof("data_or_blob_id")
            data = b""
            if which == "data":
                data = img.data
            elif which == "blob_id_with_data":
                data = img.blob_id_with_data.data
            if data:
                images.append(
                    ImageContent(
                        data=base64.b64encode(data).decode("ascii"),
                        mime_type=img.mime_type or "image/png",
                    )
                )
            else:
                notes.append(img.path or img.uuid or "an image")
    if notes:
        content.append(
            TextContent(
                text="(The user attached image(s) whose data was not sent to this server: "
                + ", ".join(notes)
                + ")"
            )
        )
    content.extend(images)
    if not content:
        content.append(TextContent(text=""))
    return LlmUserMessage(content=tuple(content))


def _context_refs(parts: agent_pb2.RequestContextParts) -> tuple[ContextRef, ...]:
    refs: list[ContextRef] = []
    for kind, bid, length in (
        ("rules", parts.rules_blob_id, parts.rules_byte_length),
        ("skills", parts.skills_blob_id, parts.skills_byte_length),
        ("subagents", parts.subagents_blob_id, parts.subagents_byte_length),
        ("mcps", parts.mcps_blob_id, parts.mcps_byte_length),
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


def decode_run_request(req: agent_pb2.AgentRunRequest) -> RunRequest:
    conversation_id = req.conversation_id if req.HasField("conversation_id") else ""
    if not conversation_id:
        raise DialectError("the run_request has no conversation_id; the client must send one")
    if not req.HasField("action"):
        raise DialectError("the run_request has no action (expected user_message_action)")
    action = req.action
    kind = action.WhichOneof("action")
    state = req.conversation_state
    history = HistoryRefs(
        root_prompt_blob_ids=tuple(bytes(b) for b in state.root_prompt_messages_json),
        turn_blob_ids=tuple(bytes(b) for b in state.turns),
    )
    parts = action.request_context_parts if action.HasField("request_context_parts") else None
    refs = _context_refs(parts) if parts is not None else ()
    dynamic = (
        parts.dynamic_context if parts is not None and parts.HasField("dynamic_context") else None
    )
    mcp_tools = tuple(mcp_definition(d) for d in req.mcp_tools.mcp_tools)
    state_mode = mode_name(state.mode) if state.HasField("mode") else "agent"
    custom = req.custom_system_prompt if req.HasField("custom_system_prompt") else None
    model_id = _model_id(req)
    if kind == "user_message_action":
        uma = action.user_message_action
        if not uma.HasField("user_message"):
            raise DialectError("the user_message_action carries no user_message")
        um = uma.user_message
        inline = uma.request_context if uma.HasField("request_context") else dynamic
        if not um.text and um.HasField("text_blob_id"):
            raise DialectError(
                "the user message text is only referenced by blob (text_blob_id); this server "
                "needs it inline in UserMessage.text"
            )
        return RunRequest(
            conversation_id=conversation_id,
            model_id=model_id,
            action=RunAction.USER_MESSAGE,
            user_message=decode_user_message(um),
            mode=mode_name(um.mode) if um.mode else state_mode,
            inline_context=decode_request_context(inline) if inline is not None else None,
            context_refs=refs,
            history=history,
            inline_history=(
                history_from_conversation_history(uma.conversation_history)
                if uma.HasField("conversation_history")
                else ()
            ),
            mcp_tools=mcp_tools,
            custom_system_prompt=custom,
            user_text=um.text,
        )
    if kind == "resume_action":
        ra = action.resume_action
        inline = ra.request_context if ra.HasField("request_context") else dynamic
        return RunRequest(
            conversation_id=conversation_id,
            model_id=model_id,
            action=RunAction.RESUME,
            user_message=None,
            mode=state_mode,
            inline_context=decode_request_context(inline) if inline is not None else None,
            context_refs=refs,
            history=history,
            mcp_tools=mcp_tools,
            custom_system_prompt=custom,
        )
    if kind in ("start_plan_action", "execute_plan_action", "async_ask_question_completion_action"):
        return _plan_or_answers(
            req,
            action,
            RunRequest(
                conversation_id=conversation_id,
                model_id=model_id,
                action=RunAction.USER_MESSAGE,
                user_message=None,
                mode=state_mode,
                inline_context=decode_request_context(dynamic) if dynamic is not None else None,
                context_refs=refs,
                history=history,
                mcp_tools=mcp_tools,
                custom_system_prompt=custom,
            ),
        )
    if kind == "cancel_action":
        raise DialectError(
            "a run_request cannot start with cancel_action; send cancel_action as a "
            "conversation_action on the stream of the run to cancel"
        )
    if kind is None:
        raise DialectError("the run_request's action is empty (expected user_message_action)")
    raise DialectError(
        f"the action {kind} is not supported by this server; send a user_message_action"
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
