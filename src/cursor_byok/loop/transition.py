"""`transition(state, input) -> Transition`: the loop's only decision function.

Pure: it reads its arguments, builds new frozen values and returns them. No I/O, clock or
randomness, so the same state and input always give the same state, emitted events and command.

Rules by input (status = `state.committed.status`); "ignored" means the same state object comes
back with no events and `WaitInput`:

Start / UserMessage
    Ready, Final, Failed, Canceled: a new turn. Appends one UserMessage (a Start's supplements as
    text parts, then the user's own parts) and issues CallLLM. Start stores its context for the
    turn; UserMessage reuses the stored one.
    WaitingLLM, WaitingClient: the message is queued (steering). It is appended after the
    current step's tool results, just before the next CallLLM; or, when the model ends with
    stop/length, after its answer, followed by a new CallLLM instead of Final. A Start's new
    context is not applied to the running turn (only its supplements, inside the queued message).
LLMEvent
    Only in WaitingLLM and only for the in-flight call_id; anything else is ignored (stale
    streams, a second `done` after the first was committed, events after a cancel).
    start opens (or resets) the pending response; *_start/*_delta/*_end update its counters;
    all are emitted unchanged with ContinueLLM. done validates `done.message`, appends it and
    goes on with the tool calls it contains (CallClient for the first one needing the client) or,
    without tool calls, Final. An invalid message fails the turn. error: Failed (reason error) or
    Canceled (reason aborted); nothing is appended.
ToolResult
    Only in WaitingClient and only for a tool call of the current assistant message that has no
    result yet; anything else is ignored. Results are appended in the call order of the
    assistant message: one for a later call is kept until its position is reached.
Cancel
    Always ends in Canceled with the pending response discarded and queued messages dropped. In
    WaitingClient, every unanswered tool call of the current assistant message first gets an
    error result "canceled by the user", so history keeps a valid call/result pairing. In
    Canceled it changes nothing (same state, command Canceled).
"""

from __future__ import annotations

from typing import Any, assert_never

import msgspec

from cursor_byok.llm.canonical import messages_hash
from cursor_byok.llm.events import (
    DoneEvent,
    ErrorEvent,
    ResponseEvent,
    StartEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from cursor_byok.llm.types import (
    AssistantMessage,
    Message,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
)
from cursor_byok.llm.types import UserMessage as LLMUserMessage

from . import ids
from .commands import (
    CONTINUE_LLM,
    WAIT_INPUT,
    CallClient,
    CallLLM,
    Canceled,
    Command,
    Failed,
    Final,
)
from .context import DEFAULT_CONTEXT, TurnContext
from .inputs import Cancel, Input, LLMEvent, Start, ToolResult, UserMessage
from .prompt import build_prompt, build_tools
from .state import (
    BUSY,
    AwaitClient,
    AwaitLLM,
    BlockKind,
    ConversationState,
    PendingResponse,
    RuntimeState,
    _KindNode,
)

_replace = msgspec.structs.replace

CANCELED_RESULT_TEXT = "canceled by the user"
# Bounds on what a synthetic error result quotes back to the model.
MAX_QUOTED_ERROR = 500
MAX_QUOTED_ARGUMENTS = 2000


class Transition(msgspec.Struct, frozen=True):
    state: RuntimeState
    emit: tuple[ResponseEvent, ...]
    command: Command


def transition(state: RuntimeState, input: Input) -> Transition:
    match input:
        case LLMEvent():
            return _on_llm_event(state, input)
        case ToolResult():
            return _on_tool_result(state, input)
        case Start():
            return _on_start(state, input)
        case UserMessage():
            return _on_user_message(state, input)
        case Cancel():
            return _on_cancel(state, input)
        case _:
            assert_never(input)


# -- common pieces -------------------------------------------------------------------------


def _ignore(state: RuntimeState) -> Transition:
    return Transition(state, (), WAIT_INPUT)


def _commit(c: ConversationState, **changes: Any) -> ConversationState:
    """The next committed state: `changes` applied and a new commit id (O(fields))."""
    n = c.commit + 1
    return _replace(c, commit=n, last_commit_id=ids.commit_id(c.conversation_id, n), **changes)


def _settle(c: ConversationState, emit: tuple[ResponseEvent, ...], command: Command) -> Transition:
    return Transition(RuntimeState(committed=c), emit, command)


def _prepend(emit: tuple[ResponseEvent, ...], t: Transition) -> Transition:
    if not emit:
        return t
    return Transition(t.state, emit + t.emit, t.command)


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


def _fail(
    c: ConversationState, message: AssistantMessage, emit: tuple[ResponseEvent, ...] = ()
) -> Transition:
    c2 = _commit(c, status="Failed", waiting=None, queued=())
    return _settle(c2, emit, Failed(message=message))


def _call_llm(c: ConversationState, input: Input) -> Transition:
    """Issue the next LLM call of the turn over the whole history (or fail the turn when the
    per-turn call budget is spent). `c` carries the uncommitted changes of this transition."""
    context = c.context if c.context is not None else DEFAULT_CONTEXT
    if c.llm_calls >= context.max_llm_calls:
        return _fail(
            c,
            loop_failure(
                f"stopped: this turn reached the limit of {context.max_llm_calls} model calls "
                "(max_llm_calls)"
            ),
        )
    n = c.llm_calls + 1
    call = ids.call_id(c.turn_id, n)
    request = RequestMessages(
        system_prompt=build_prompt(input, c),
        messages=c.messages,
        tools=build_tools(input, c),
    )
    digest = messages_hash(c.messages)
    c2 = _commit(
        c, llm_calls=n, status="WaitingLLM", waiting=AwaitLLM(call_id=call, messages_hash=digest)
    )
    return _settle(c2, (), CallLLM(call_id=call, request=request, messages_hash=digest))


def _begin_turn(
    c: ConversationState, context: TurnContext, message: LLMUserMessage, input: Input
) -> Transition:
    turn = c.turn + 1
    c2 = _replace(
        c,
        turn=turn,
        turn_id=ids.turn_id(c.conversation_id, turn),
        context=context,
        messages=(*c.messages, message),
        llm_calls=0,
        waiting=None,
        queued=(),
    )
    return _call_llm(c2, input)


def _queue(state: RuntimeState, message: LLMUserMessage) -> Transition:
    c = state.committed
    c2 = _commit(c, queued=(*c.queued, message))
    return Transition(RuntimeState(c2, state.pending_response), (), WAIT_INPUT)


def opening_message(context: TurnContext, user_message: LLMUserMessage) -> LLMUserMessage:
    """The one message that opens a turn: supplements as text parts, then the user's parts."""
    if not context.supplements:
        return user_message
    parts = tuple(TextContent(text=s) for s in context.supplements)
    return LLMUserMessage(content=parts + user_message.content)


# -- Start / UserMessage -------------------------------------------------------------------


def _on_start(state: RuntimeState, input: Start) -> Transition:
    message = opening_message(input.context, input.user_message)
    c = state.committed
    if c.status in BUSY:
        return _queue(state, message)
    context = input.context
    if context.supplements:  # they belong to this turn's opening message only
        context = _replace(context, supplements=())
    return _begin_turn(c, context, message, input)


def _on_user_message(state: RuntimeState, input: UserMessage) -> Transition:
    c = state.committed
    if c.status in BUSY:
        return _queue(state, input.message)
    context = c.context if c.context is not None else DEFAULT_CONTEXT
    return _begin_turn(c, context, input.message, input)


# -- LLM events ----------------------------------------------------------------------------


def _on_llm_event(state: RuntimeState, input: LLMEvent) -> Transition:
    c = state.committed
    waiting = c.waiting
    if c.status != "WaitingLLM" or not isinstance(waiting, AwaitLLM):
        return _ignore(state)
    if input.call_id != waiting.call_id:
        return _ignore(state)
    event = input.event
    pending = state.pending_response
    match event:
        case TextDelta() | ThinkingDelta() | ToolCallDelta():
            if pending is None:
                pending = PendingResponse(call_id=input.call_id)
            pending = _replace(pending, events=pending.events + 1, deltas=pending.deltas + 1)
        case StartEvent():
            # A second start for the same call is a retried stream: forget the first one.
            pending = PendingResponse(call_id=input.call_id, events=1)
        case TextStart():
            pending = _opened(pending, input.call_id, "text")
        case ThinkingStart():
            pending = _opened(pending, input.call_id, "thinking")
        case ToolCallStart():
            pending = _opened(pending, input.call_id, "toolCall")
        case TextEnd() | ThinkingEnd() | ToolCallEnd():
            if pending is None:
                pending = PendingResponse(call_id=input.call_id)
            pending = _replace(
                pending, events=pending.events + 1, open_blocks=pending.open_blocks - 1
            )
        case DoneEvent():
            return _on_done(c, waiting, pending, event, input)
        case ErrorEvent():
            return _on_error(c, event)
        case _:
            assert_never(event)
    return Transition(RuntimeState(c, pending), (event,), CONTINUE_LLM)


def _opened(pending: PendingResponse | None, call_id: str, kind: BlockKind) -> PendingResponse:
    if pending is None:
        pending = PendingResponse(call_id=call_id)
    return _replace(
        pending,
        events=pending.events + 1,
        blocks=pending.blocks + 1,
        open_blocks=pending.open_blocks + 1,
        kinds=_KindNode(kind, pending.kinds),
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


def _on_done(
    c: ConversationState,
    waiting: AwaitLLM,
    pending: PendingResponse | None,
    event: DoneEvent,
    input: Input,
) -> Transition:
    message = event.message
    problem = validate_response(message, pending)
    if problem is not None:
        failed = _replace(
            message,
            stop_reason="error",
            error_message=f"invalid response from the model: {problem}",
        )
        return _fail(c, failed, (ErrorEvent(reason="error", message=failed),))
    emit: tuple[ResponseEvent, ...] = (event,)
    calls = message.tool_calls
    if calls:
        c2 = _replace(
            c,
            messages=(*c.messages, message),
            status="WaitingClient",
            waiting=AwaitClient(call_id=waiting.call_id, calls=calls, next=0, operation_id=""),
        )
        return _prepend(emit, _advance(c2, input))
    if c.queued:  # steering: the user spoke while the model was answering
        c2 = _replace(c, messages=(*c.messages, message, *c.queued), queued=(), waiting=None)
        return _prepend(emit, _call_llm(c2, input))
    c2 = _commit(c, messages=(*c.messages, message), status="Final", waiting=None)
    return _settle(c2, emit, Final(message=message))


def _on_error(c: ConversationState, event: ErrorEvent) -> Transition:
    if event.reason == "aborted":
        c2 = _commit(c, status="Canceled", waiting=None, queued=())
        return _settle(c2, (event,), Canceled(reason=event.error_message))
    return _fail(c, event.message, (event,))


# -- tool calls ----------------------------------------------------------------------------


def _error_result(call: ToolCall, text: str) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=(TextContent(text=text),),
        is_error=True,
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def synthetic_result(call: ToolCall, tool_names: tuple[str, ...]) -> ToolResultMessage | None:
    """The loop's own answer to a call the client cannot run, or None if the client should."""
    if call.name not in tool_names:
        return _error_result(
            call,
            f"Error: unknown tool {call.name!r}. Available tools: {', '.join(tool_names)}.",
        )
    if call.arguments_error is not None:
        raw = call.raw_arguments if call.raw_arguments is not None else ""
        return _error_result(
            call,
            f"Error: the arguments of this {call.name} call were not valid JSON "
            f"({_clip(call.arguments_error, MAX_QUOTED_ERROR)}). "
            f"Raw arguments: {_clip(raw, MAX_QUOTED_ARGUMENTS)!r}. "
            "Call the tool again with a JSON object matching its parameters.",
        )
    return None


def _advance(c: ConversationState, input: Input) -> Transition:
    """Answer what can be answered without the client, from `waiting.next` on, in call order;
    then either send the next call to the client or, all answered, call the LLM again."""
    waiting = c.waiting
    assert isinstance(waiting, AwaitClient)
    early = list(waiting.early)
    names = tuple(t.name for t in build_tools(input, c))
    added: list[Message] = []
    i = waiting.next
    while i < len(waiting.calls):
        call = waiting.calls[i]
        result = _take_early(early, call.id) or synthetic_result(call, names)
        if result is None:
            op = ids.operation_id(waiting.call_id, call.id)
            c2 = _commit(
                c,
                messages=(*c.messages, *added),
                status="WaitingClient",
                waiting=_replace(waiting, next=i, operation_id=op, early=tuple(early)),
            )
            return _settle(c2, (), CallClient(operation_id=op, tool_call=call))
        added.append(result)
        i += 1
    c2 = _replace(c, messages=(*c.messages, *added, *c.queued), queued=(), waiting=None)
    return _call_llm(c2, input)


def _take_early(early: list[ToolResultMessage], tool_call_id: str) -> ToolResultMessage | None:
    for k, result in enumerate(early):
        if result.tool_call_id == tool_call_id:
            return early.pop(k)
    return None


def _on_tool_result(state: RuntimeState, input: ToolResult) -> Transition:
    c = state.committed
    waiting = c.waiting
    if c.status != "WaitingClient" or not isinstance(waiting, AwaitClient):
        return _ignore(state)
    result = input.message
    index = next(
        (k for k, call in enumerate(waiting.calls) if call.id == result.tool_call_id), None
    )
    if index is None or index < waiting.next:  # unknown, or already answered
        return _ignore(state)
    call = waiting.calls[index]
    if result.tool_name != call.name:  # the pairing is by id; keep the name the model used
        result = _replace(result, tool_name=call.name)
    if index > waiting.next:  # a later call answered first: keep it until its turn
        if any(r.tool_call_id == result.tool_call_id for r in waiting.early):
            return _ignore(state)
        c2 = _commit(c, waiting=_replace(waiting, early=(*waiting.early, result)))
        return Transition(RuntimeState(c2, state.pending_response), (), WAIT_INPUT)
    c2 = _replace(c, messages=(*c.messages, result), waiting=_replace(waiting, next=index + 1))
    return _advance(c2, input)


# -- Cancel --------------------------------------------------------------------------------


def _on_cancel(state: RuntimeState, input: Cancel) -> Transition:
    c = state.committed
    command = Canceled(reason=input.reason)
    if c.status == "Canceled" and state.pending_response is None:
        return Transition(state, (), command)
    messages = c.messages
    waiting = c.waiting
    if c.status == "WaitingClient" and isinstance(waiting, AwaitClient):
        early = list(waiting.early)
        closing = [
            _take_early(early, call.id) or _error_result(call, CANCELED_RESULT_TEXT)
            for call in waiting.calls[waiting.next :]
        ]
        messages = (*messages, *closing)
    c2 = _commit(c, messages=messages, status="Canceled", waiting=None, queued=())
    return _settle(c2, (), command)
