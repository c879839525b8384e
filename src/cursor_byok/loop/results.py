"""Messages the loop writes itself: tool results for calls the client will not answer, and the
description of a failure. Pure functions of their arguments."""

from __future__ import annotations

from cursor_byok.llm.types import (
    AssistantMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

from . import catalogue
from .state import BlockKind, PendingResponse, PlanRecord

CANCELED_RESULT_TEXT = "canceled by the user"

# Why a model or summary call ended before its answer, as its record says (CallEnd.error).
CALL_CANCELED = "canceled by the client"
CALL_STREAM_CLOSED = "canceled by the client: its stream closed"
CALL_SUPERSEDED = "superseded by a newer request"
CALL_SHUTDOWN = "shutdown: the server stopped during the call"
CALL_MOVED = "moved: the run continues on another replica"
# The most of a client's own cancel reason a call's record quotes.
MAX_CLIENT_REASON = 200


def canceled_call(client_reason: str, default: str) -> str:
    """A call ended by the client's cancel, with the client's words when it gave some."""
    if not client_reason or client_reason == default:
        return CALL_CANCELED
    return f"{CALL_CANCELED} ({_clip(client_reason, MAX_CLIENT_REASON)})"


def not_reopened(grace_s: float) -> str:
    """A shim run whose RunSSE did not come back within its reconnect grace."""
    return f"canceled: the client did not reconnect within {grace_s:g} s"


# Bounds on what a synthetic error result quotes back to the model.
MAX_QUOTED_ERROR = 500
MAX_QUOTED_ARGUMENTS = 2000


def error_result(call: ToolCall, text: str) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=(TextContent(text=text),),
        is_error=True,
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def refused_result(call: ToolCall, mode: str) -> ToolResultMessage:
    return error_result(
        call,
        f"Error: {call.name} is not allowed in {mode} mode, which never changes the workspace; "
        "the call was not run. Answer from what you can read, or ask the user to switch to "
        "agent mode to make changes.",
    )


def _not_offered(name: str, mode: str) -> str:
    """Why a call names a tool the turn did not offer: one of Cursor's that belongs to other
    modes (the model may know it from the user's rules), one this server does not run, or a
    name nobody offers."""
    tool = catalogue.TOOLS_BY_NAME.get(name)
    if tool is None:
        return f"unknown tool {name!r}."
    if tool.status is not catalogue.Status.BUILT:
        return f"{name} is not available on this server."
    homes = [m.value for m in catalogue.Mode if name in catalogue.MODES[m]]
    here = catalogue.mode_of(mode).value if mode else "this"
    if here in homes:  # offered in this mode, but switched off (a gate, our configuration)
        return f"{name} is switched off for this conversation."
    return f"{name} is not offered in {here} mode (only in {', '.join(homes)} mode)."


def synthetic_result(
    call: ToolCall,
    tool_names: tuple[str, ...],
    refused: frozenset[str] = frozenset(),
    mode: str = "",
) -> ToolResultMessage | None:
    """The loop's own answer to a call the client cannot run or must not run (a tool the mode
    refuses), or None if the client should."""
    if call.name in refused:
        return refused_result(call, mode)
    if call.name not in tool_names:
        return error_result(
            call,
            f"Error: {_not_offered(call.name, mode)} Available tools: {', '.join(tool_names)}.",
        )
    if call.arguments_error is not None:
        raw = call.raw_arguments if call.raw_arguments is not None else ""
        return error_result(
            call,
            f"Error: the arguments of this {call.name} call were not valid JSON "
            f"({_clip(call.arguments_error, MAX_QUOTED_ERROR)}). "
            f"Raw arguments: {_clip(raw, MAX_QUOTED_ARGUMENTS)!r}. "
            "Call the tool again with a JSON object matching its parameters.",
        )
    return None


def timed_out_result(call: ToolCall, waited_ms: int | None) -> ToolResultMessage:
    within = f" within {waited_ms / 1000:g} s" if waited_ms is not None else ""
    return error_result(
        call,
        f"Error: the client did not answer the {call.name} call{within}; it was aborted. "
        "Its effects, if any, are unknown.",
    )


def unknown_outcome_result(call: ToolCall) -> ToolResultMessage:
    return error_result(
        call,
        f"Error: this {call.name} call was sent to the client, but its answer was lost (the "
        "server restarted or the connection dropped). Its outcome is unknown and it was not "
        "run again. Check the current state before retrying it.",
    )


def loop_answer(text: str) -> AssistantMessage:
    """The loop's own answer to a run that needs no model call (never appended to history)."""
    return AssistantMessage(
        content=(TextContent(text=text),) if text else (),
        api="loop",
        provider="cursor-byok",
        model="",
        stop_reason="stop",
    )


def loop_failure(text: str) -> AssistantMessage:
    """The message of a failure the loop itself detected (never appended to history)."""
    return AssistantMessage(
        content=(),
        api="loop",
        provider="cursor-byok",
        model="",
        stop_reason="error",
        error_message=text,
    )


def _kind(block: TextContent | ThinkingContent | ToolCall) -> BlockKind:
    if isinstance(block, TextContent):
        return "text"
    if isinstance(block, ThinkingContent):
        return "thinking"
    return "toolCall"


def validate_response(message: AssistantMessage, pending: PendingResponse | None) -> str | None:
    """Why `message` cannot be committed, or None. Checks the tool calls (non-empty, unique ids
    and names) and, when the stream announced blocks, that the message has exactly those."""
    seen: set[str] = set()
    for call in message.tool_calls:
        if not call.id:
            return f"a {call.name or 'nameless'} tool call has no id"
        if not call.name:
            return f"tool call {call.id} has no tool name"
        if call.id in seen:
            return f"tool call id {call.id} is used twice"
        seen.add(call.id)
    if pending is not None and pending.blocks:
        if pending.open_blocks != 0:
            return f"{pending.open_blocks} content block(s) were not closed before done"
        streamed = pending.block_kinds()
        final = tuple(_kind(b) for b in message.content)
        if streamed != final:
            return f"the final message has blocks {list(final)}, the stream had {list(streamed)}"
    return None


def build_message(plan: PlanRecord) -> UserMessage:
    """The message that opens a Build turn (the IDE's Build button sends no text): the plan
    itself, so the model has it in its context whatever happened to the plan file."""
    where = f" It is saved at {plan.uri}." if plan.uri else ""
    if not plan.text.strip():
        read = f" Read it from {plan.uri} first." if plan.uri else ""
        text = (
            "The user pressed Build: carry out the plan made earlier in this conversation."
            f"{where}{read} Work through it step by step and report what you did."
        )
        return UserMessage(content=(TextContent(text=text),))
    text = (
        "The user pressed Build: carry out this plan now, step by step, and report what you "
        f"did.{where}\n\n<plan>\n{plan.text.strip()}\n</plan>"
    )
    return UserMessage(content=(TextContent(text=text),))
