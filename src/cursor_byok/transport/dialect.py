"""The Cursor dialect: `agent.v1` protobuf ↔ native values. Pure code: no I/O, no clock reads
(an injected `now_ms`), no state beyond one LLM call's stream encoder.

The dialect translates; it never decides, never edits history, never runs tools and never
stores loop state (design §9). docs/dialect.md has the tables.

Decoding:   `decode_client_message` (→ a `ClientEvent` to `match` on), `decode_run_request`,
            `blob_data`, `request_context_from_reply`, plus context.py / history.py helpers.
Encoding:   `StreamEncoder` (LLM events → interaction updates), `turn_ended`, `heartbeat`,
            `get_blob` / `set_blob`, `request_context_exec`, and the `*_end` stream errors.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from ..llm.events import (
    ResponseEvent,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallStart,
)
from ..llm.types import ImageContent, TextContent, Usage, UserContent
from ..llm.types import Message as LlmMessage
from ..llm.types import UserMessage as LlmUserMessage
from .channel import EndError
from .context import (
    ContextPart,
    McpIndex,
    McpTool,
    decode_request_context_part,
    merge_context,
)
from .exec_mapping import placeholder_tool_call
from .history import (
    DialectError,
    history_from_conversation_history,
    history_from_root_prompt_blobs,
    history_from_turn_blobs,
)
from .cursor.proto import agent_pb2, aiserver_pb2

__all__ = [
    "EMPTY_BLOB_ID",
    "CancelEvent",
    "ClientEvent",
    "ClientHeartbeatEvent",
    "ContextPart",
    "ContextRef",
    "DialectError",
    "ExecControl",
    "ExecReply",
    "FollowUpUserMessage",
    "HistoryRefs",
    "InteractionReply",
    "KvReply",
    "McpIndex",
    "McpTool",
    "ResumeEvent",
    "RunRequest",
    "RunRequestEvent",
    "StreamEncoder",
    "UnknownEvent",
    "bad_request_end",
    "blob_data",
    "blob_id",
    "call_id_for",
    "canceled_end",
    "decode_client_message",
    "decode_request_context_part",
    "decode_run_request",
    "decode_user_message",
    "get_blob",
    "heartbeat",
    "history_from_conversation_history",
    "history_from_root_prompt_blobs",
    "history_from_turn_blobs",
    "internal_end",
    "merge_context",
    "mode_name",
    "provider_error_end",
    "request_context_exec",
    "request_context_from_reply",
    "set_blob",
    "turn_ended",
]

EMPTY_BLOB_ID = hashlib.sha256(b"").digest()
_ID_BAD = re.compile(r"[^a-zA-Z0-9_-]")


def blob_id(data: bytes) -> bytes:
    """A blob's id: SHA-256 of its bytes (32 raw bytes)."""
    return hashlib.sha256(data).digest()


# -- decoded values ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContextRef:
    """A `request_context_parts` blob to fetch with get_blob_args."""

    kind: str  # "rules" | "skills" | "subagents" | "mcps"
    blob_id: bytes
    byte_length: int


@dataclass(frozen=True, slots=True)
class HistoryRefs:
    """Blob ids of the client's checkpoint (`conversation_state`)."""

    root_prompt_blob_ids: tuple[bytes, ...] = ()
    turn_blob_ids: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class RunRequest:
    conversation_id: str
    model_id: str | None
    action: Literal["user_message", "resume"]
    user_message: LlmUserMessage | None
    mode: str
    inline_context: agent_pb2.RequestContext | None
    context_refs: tuple[ContextRef, ...] = ()
    history: HistoryRefs = field(default_factory=HistoryRefs)
    inline_history: tuple[LlmMessage, ...] = ()
    mcp_tools: tuple[agent_pb2.McpToolDefinition, ...] = ()
    message_id: str = ""
    run_id: str | None = None
    custom_system_prompt: str | None = None
    # The prompt text lives in a client blob (UserMessage.text_blob_id) and was not inline.
    text_blob_id: bytes | None = None


@dataclass(frozen=True, slots=True)
class RunRequestEvent:
    request: RunRequest


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


@dataclass(frozen=True, slots=True)
class CancelEvent:
    reason: str


@dataclass(frozen=True, slots=True)
class FollowUpUserMessage:
    message: LlmUserMessage
    context: agent_pb2.RequestContext | None = None
    mode: str | None = None


@dataclass(frozen=True, slots=True)
class ResumeEvent:
    pass


@dataclass(frozen=True, slots=True)
class ClientHeartbeatEvent:
    pass


@dataclass(frozen=True, slots=True)
class InteractionReply:
    id: int
    message: agent_pb2.InteractionResponse


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    kind: str


ClientEvent: TypeAlias = (
    RunRequestEvent
    | ExecReply
    | ExecControl
    | KvReply
    | CancelEvent
    | FollowUpUserMessage
    | ResumeEvent
    | ClientHeartbeatEvent
    | InteractionReply
    | UnknownEvent
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


def decode_run_request(req: agent_pb2.AgentRunRequest) -> RunRequest:
    conversation_id = req.conversation_id if req.HasField("conversation_id") else ""
    if not conversation_id:
        raise DialectError("the run_request has no conversation_id; the client must send one")
    model_id: str | None = None
    if req.HasField("requested_model") and req.requested_model.model_id:
        model_id = req.requested_model.model_id
    elif req.HasField("model_details") and req.model_details.model_id:
        model_id = req.model_details.model_id
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
    mcp_tools = tuple(req.mcp_tools.mcp_tools)
    state_mode = mode_name(state.mode) if state.HasField("mode") else "agent"
    common = {
        "conversation_id": conversation_id,
        "model_id": model_id,
        "context_refs": refs,
        "history": history,
        "mcp_tools": mcp_tools,
        "run_id": req.run_id if req.HasField("run_id") else None,
        "custom_system_prompt": (
            req.custom_system_prompt if req.HasField("custom_system_prompt") else None
        ),
    }
    if kind == "user_message_action":
        uma = action.user_message_action
        if not uma.HasField("user_message"):
            raise DialectError("the user_message_action carries no user_message")
        um = uma.user_message
        inline = uma.request_context if uma.HasField("request_context") else dynamic
        mode = mode_name(um.mode) if um.mode else state_mode
        inline_history = (
            history_from_conversation_history(uma.conversation_history)
            if uma.HasField("conversation_history")
            else ()
        )
        text_blob = bytes(um.text_blob_id) if um.HasField("text_blob_id") else None
        if not um.text and text_blob is not None:
            raise DialectError(
                "the user message text is only referenced by blob (text_blob_id); this server "
                "needs it inline in UserMessage.text"
            )
        return RunRequest(
            action="user_message",
            user_message=decode_user_message(um),
            mode=mode,
            inline_context=inline,
            inline_history=inline_history,
            message_id=um.message_id,
            text_blob_id=text_blob,
            **common,  # type: ignore[arg-type]
        )
    if kind == "resume_action":
        ra = action.resume_action
        inline = ra.request_context if ra.HasField("request_context") else dynamic
        return RunRequest(
            action="resume",
            user_message=None,
            mode=state_mode,
            inline_context=inline,
            **common,  # type: ignore[arg-type]
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


def decode_client_message(msg: agent_pb2.AgentClientMessage) -> ClientEvent:
    kind = msg.WhichOneof("message")
    match kind:
        case "run_request":
            return RunRequestEvent(decode_run_request(msg.run_request))
        case "exec_client_message":
            return ExecReply(id=msg.exec_client_message.id, message=msg.exec_client_message)
        case "exec_client_control_message":
            control = msg.exec_client_control_message
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
        case "kv_client_message":
            return KvReply(id=msg.kv_client_message.id, message=msg.kv_client_message)
        case "conversation_action":
            action = msg.conversation_action
            which = action.WhichOneof("action")
            if which == "cancel_action":
                return CancelEvent(reason=action.cancel_action.reason)
            if which == "user_message_action":
                uma = action.user_message_action
                if not uma.HasField("user_message"):
                    raise DialectError("the user_message_action carries no user_message")
                context = uma.request_context if uma.HasField("request_context") else None
                if context is None and action.HasField("request_context_parts"):
                    p = action.request_context_parts
                    context = p.dynamic_context if p.HasField("dynamic_context") else None
                um = uma.user_message
                return FollowUpUserMessage(
                    message=decode_user_message(um),
                    context=context,
                    mode=mode_name(um.mode) if um.mode else None,
                )
            if which == "resume_action":
                return ResumeEvent()
            return UnknownEvent(kind=f"conversation_action.{which or 'empty'}")
        case "interaction_response":
            return InteractionReply(
                id=msg.interaction_response.id, message=msg.interaction_response
            )
        case "client_heartbeat":
            return ClientHeartbeatEvent()
        case "prewarm_request":
            return UnknownEvent(kind="prewarm_request")
        case _:
            raise DialectError("the client message is empty (no AgentClientMessage field set)")


def blob_data(reply: KvReply) -> bytes | None:
    """The blob a get_blob_args asked for; None when the client has no such blob."""
    m = reply.message
    if m.WhichOneof("message") != "get_blob_result":
        return None
    r = m.get_blob_result
    if r.HasField("error") or not r.HasField("blob_data"):
        return None
    return bytes(r.blob_data)


def request_context_from_reply(reply: ClientEvent) -> agent_pb2.RequestContext | None:
    """The RequestContext of a request_context_result.success; None for error, rejected,
    throw or anything else."""
    if not isinstance(reply, ExecReply):
        return None
    m = reply.message
    if m.WhichOneof("message") != "request_context_result":
        return None
    r = m.request_context_result
    if r.WhichOneof("result") != "success":
        return None
    return r.success.request_context


# -- encoding: requests to the client -----------------------------------------------------------


def get_blob(kv_id: int, blob_id: bytes) -> agent_pb2.AgentServerMessage:
    return agent_pb2.AgentServerMessage(
        kv_server_message=agent_pb2.KvServerMessage(
            id=kv_id, get_blob_args=agent_pb2.GetBlobArgs(blob_id=blob_id)
        )
    )


def set_blob(kv_id: int, data: bytes) -> agent_pb2.AgentServerMessage:
    return agent_pb2.AgentServerMessage(
        kv_server_message=agent_pb2.KvServerMessage(
            id=kv_id, set_blob_args=agent_pb2.SetBlobArgs(blob_id=blob_id(data), blob_data=data)
        )
    )


def request_context_exec(exec_id: int) -> agent_pb2.AgentServerMessage:
    return agent_pb2.AgentServerMessage(
        exec_server_message=agent_pb2.ExecServerMessage(
            id=exec_id, request_context_args=agent_pb2.RequestContextArgs()
        )
    )


# -- encoding: the stream -------------------------------------------------------------------------


def call_id_for(model_call_id: str, content_index: int) -> str:
    """The transport id of one tool call, stable across partial/started/delta/completed: the
    LLM call's id (in the tool id charset) and the call's content index."""
    return f"{_ID_BAD.sub('_', model_call_id)}-{content_index}"


def _update(iu: agent_pb2.InteractionUpdate) -> agent_pb2.AgentServerMessage:
    return agent_pb2.AgentServerMessage(interaction_update=iu)


class StreamEncoder:
    """Native stream events of one LLM call → interaction updates. One per LLM call.

    text_delta → text_delta; thinking_delta → thinking_delta; thinking_end →
    thinking_completed (duration from the injected clock); toolcall_start → partial_tool_call
    with a typed placeholder; toolcall_delta → partial_tool_call with args_text_delta;
    everything else → nothing (the runner ends turns and starts tools)."""

    def __init__(self, *, model_call_id: str, now_ms: Callable[[], int]) -> None:
        self.model_call_id = model_call_id
        self._now_ms = now_ms
        self._thinking_since: dict[int, int] = {}
        self._tools: dict[int, tuple[str, str]] = {}  # content index → (name, tool call id)

    def encode(self, event: ResponseEvent) -> list[agent_pb2.AgentServerMessage]:
        match event:
            case TextDelta(delta=delta):
                if not delta:
                    return []
                return [
                    _update(
                        agent_pb2.InteractionUpdate(
                            text_delta=agent_pb2.TextDeltaUpdate(text=delta)
                        )
                    )
                ]
            case ThinkingStart(content_index=index):
                self._thinking_since.setdefault(index, self._now_ms())
                return []
            case ThinkingDelta(content_index=index, delta=delta):
                self._thinking_since.setdefault(index, self._now_ms())
                if not delta:
                    return []
                return [
                    _update(
                        agent_pb2.InteractionUpdate(
                            thinking_delta=agent_pb2.ThinkingDeltaUpdate(text=delta)
                        )
                    )
                ]
            case ThinkingEnd(content_index=index):
                now = self._now_ms()
                since = self._thinking_since.pop(index, now)
                duration = max(0, min(now - since, 2**31 - 1))
                return [
                    _update(
                        agent_pb2.InteractionUpdate(
                            thinking_completed=agent_pb2.ThinkingCompletedUpdate(
                                thinking_duration_ms=duration
                            )
                        )
                    )
                ]
            case ToolCallStart(content_index=index, id=tool_call_id, name=name):
                self._tools[index] = (name, tool_call_id)
                partial = agent_pb2.PartialToolCallUpdate(
                    call_id=call_id_for(self.model_call_id, index),
                    tool_call=placeholder_tool_call(name, tool_call_id),
                    model_call_id=self.model_call_id,
                )
                return [_update(agent_pb2.InteractionUpdate(partial_tool_call=partial))]
            case ToolCallDelta(content_index=index, delta=delta):
                if not delta:
                    return []
                partial = agent_pb2.PartialToolCallUpdate(
                    call_id=call_id_for(self.model_call_id, index),
                    args_text_delta=delta,
                    model_call_id=self.model_call_id,
                )
                known = self._tools.get(index)
                if known is not None:
                    partial.tool_call.CopyFrom(placeholder_tool_call(*known))
                return [_update(agent_pb2.InteractionUpdate(partial_tool_call=partial))]
            case _:
                return []


def turn_ended(usage: Usage) -> agent_pb2.AgentServerMessage:
    """turn_ended with the run's usage totals (input excludes cache reads and writes)."""
    return _update(
        agent_pb2.InteractionUpdate(
            turn_ended=agent_pb2.TurnEndedUpdate(
                input_tokens=usage.input,
                output_tokens=usage.output,
                cache_read_tokens=usage.cache_read,
                cache_write_tokens=usage.cache_write,
                reasoning_tokens=usage.reasoning,
            )
        )
    )


def heartbeat() -> agent_pb2.AgentServerMessage:
    return _update(agent_pb2.InteractionUpdate(heartbeat=agent_pb2.HeartbeatUpdate()))


# -- stream endings ------------------------------------------------------------------------------


def _details(error: int, title: str, detail: str, *, retryable: bool, expected: bool) -> bytes:
    details = aiserver_pb2.ErrorDetails(
        error=error,  # type: ignore[arg-type]
        details=aiserver_pb2.CustomErrorDetails(
            title=title,
            detail=detail,
            is_retryable=retryable,
            show_request_id=True,
            should_show_immediate_error=False,
        ),
        is_expected=expected,
    )
    return bytes(details.SerializeToString(deterministic=True))


def provider_error_end(message: str) -> EndError:
    """The model provider failed: `unavailable`, shown with a retry affordance."""
    return EndError(
        code="unavailable",
        message=message,
        details=_details(
            aiserver_pb2.ErrorDetails.ERROR_PROVIDER_ERROR,
            "Provider error",
            message,
            retryable=True,
            expected=False,
        ),
    )


def canceled_end(reason: str) -> EndError:
    return EndError(
        code="canceled",
        message=reason,
        details=_details(
            aiserver_pb2.ErrorDetails.ERROR_USER_ABORTED_REQUEST,
            "Canceled",
            reason,
            retryable=False,
            expected=True,
        ),
    )


def bad_request_end(message: str) -> EndError:
    """A request this server cannot serve as sent (bad message, unknown model, ...). Connect
    code `invalid_argument`; an unknown model is tagged ERROR_BAD_MODEL_NAME."""
    unknown_model = message.startswith("unknown model")
    error = (
        aiserver_pb2.ErrorDetails.ERROR_BAD_MODEL_NAME
        if unknown_model
        else aiserver_pb2.ErrorDetails.ERROR_BAD_REQUEST
    )
    return EndError(
        code="invalid_argument",
        message=message,
        details=_details(
            error,
            "Unknown model" if unknown_model else "Bad request",
            message,
            retryable=False,
            expected=True,
        ),
    )


def internal_end(message: str) -> EndError:
    return EndError(
        code="internal",
        message=message,
        details=_details(
            aiserver_pb2.ErrorDetails.ERROR_INTERNAL,
            "Server error",
            message,
            retryable=True,
            expected=False,
        ),
    )
