"""`transition(state, input) -> Transition`: the only place that decides (design §5-7, §10).

Every rule of the conversation lives here: how a turn starts, streams, calls tools and ends;
what a cancel, a newer run, a lost answer, a reopened run or a rewind does. The runtime
executes the returned command and never decides any of this itself. docs/loop.md has the
rules as a table.

Besides the next state, the events to publish and the command, a transition says what it did
that the runtime must carry out: the messages it appended to the log (`appended`, stored as
rows in the same commit), the tool calls it answered itself (`local_results`, whose cards the
client still needs) and how the model call it closed ended (`call_end`, for its record).
"""

from __future__ import annotations

import enum
from typing import Any, assert_never

import msgspec

from cursor_byok.llm.canonical import messages_hash
from cursor_byok.llm.events import (
    DoneEvent,
    ErrorEvent,
    ErrorKind,
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
    ToolCall,
    ToolResultMessage,
)
from cursor_byok.llm.types import UserMessage as LLMUserMessage

from . import catalogue, compaction, derived, ids, todos, view
from .commands import (
    CONTINUE_LLM,
    WAIT_INPUT,
    CallClient,
    CallLLM,
    Canceled,
    Command,
    Failed,
    FailureKind,
    Final,
    ResendLLM,
    Summarize,
)
from .context import DEFAULT_CONTEXT, ContextWindow, TurnContext
from .inputs import (
    Cancel,
    ClientGone,
    Compact,
    Input,
    LLMEvent,
    LostCause,
    ModeSwitched,
    Note,
    PlanCreated,
    Resume,
    Rewind,
    Start,
    SummaryDone,
    SummaryFailed,
    Supersede,
    Suspend,
    SuspendCause,
    ToolEffect,
    ToolLost,
    ToolResult,
    UserMessage,
)
from .meter import prompt_chars
from .prompt import render_prompt, render_tools
from .results import (
    CALL_MOVED,
    CALL_SHUTDOWN,
    CALL_STREAM_CLOSED,
    CALL_SUPERSEDED,
    CANCELED_RESULT_TEXT,
    build_message,
    canceled_call,
    error_result,
    loop_answer,
    loop_failure,
    not_reopened,
    synthetic_result,
    timed_out_result,
    unknown_outcome_result,
    validate_response,
)
from .state import (
    AfterSummary,
    AwaitClient,
    AwaitLLM,
    AwaitSummary,
    BlockKind,
    CompactionMark,
    CompactionReason,
    ConversationState,
    PendingResponse,
    PlanMark,
    PlanRecord,
    RuntimeState,
    Status,
    _KindNode,
)
from .todos import TodoUpdate
from .tools import LOCAL_TOOL_NAMES, side_effects

_replace = msgspec.structs.replace

CONTINUED_ELSEWHERE = "the conversation was continued by another request"


class LoopError(ValueError):
    """An input that cannot exist for this state (a bug of whoever built it), as opposed to one
    that merely does not apply now (those are ignored)."""


class CallOutcome(enum.StrEnum):
    """How a model call ended, for its record. Values are the store's call statuses."""

    COMMITTED = "committed"  # its answer is in the history
    FAILED = "failed"
    CANCELED = "canceled"


class CallEnd(msgspec.Struct, frozen=True, omit_defaults=True):
    call_id: str
    outcome: CallOutcome
    error: str | None = None


class LocalResult(msgspec.Struct, frozen=True):
    """A tool call the loop answered itself: `result` is in the history; the client's card
    for the call (`llm_call_id`, `content_index`) is still to be completed. `todos`: a
    TodoWrite the loop applied (its card shows the submitted items and the merged list)."""

    call: ToolCall
    llm_call_id: str
    content_index: int
    result: ToolResultMessage
    todos: TodoUpdate | None = None


class Compacted(msgspec.Struct, frozen=True, omit_defaults=True):
    """A compaction this transition finished (for the client's summary updates, the metrics
    and the log line). `call_id` empty: there was nothing to compact (a /summarize of a short
    conversation), no summary call was made and `summary` is empty."""

    reason: CompactionReason
    summary: str = ""
    call_id: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    summarized: int = 0  # messages the summary replaced in the view
    kept: int = 0  # messages kept after it


class Transition(msgspec.Struct, frozen=True):
    state: RuntimeState
    emit: tuple[ResponseEvent, ...]
    command: Command
    appended: tuple[Message, ...] = ()  # appended to the log, in order, by this transition
    local_results: tuple[LocalResult, ...] = ()
    call_end: CallEnd | None = None
    compacted: Compacted | None = None


def transition(state: RuntimeState, input: Input) -> Transition:
    before = state.committed.log
    match input:
        case LLMEvent():
            t = _on_llm_event(state, input)
        case ToolResult():
            t = _on_tool_result(state, input)
        case Start():
            t = _on_start(state, input)
        case Note():
            t = _on_note(state, input)
        case UserMessage():
            t = _on_user_message(state, input)
        case Cancel():
            call = canceled_call(input.reason, Cancel().reason)
            t = _on_cancel(state, input.reason, cards=True, call_reason=call)
        case Supersede():
            t = _on_cancel(state, input.reason, cards=True, call_reason=CALL_SUPERSEDED)
        case ClientGone(grace_s=grace):
            reason = not_reopened(grace) if grace else CALL_STREAM_CLOSED
            t = _on_cancel(state, reason, cards=False, call_reason=reason)
        case Suspend():
            t = _on_suspend(state, input.cause)
        case Resume():
            t = _on_resume(state, input)
        case ToolLost():
            t = _on_tool_lost(state, input)
        case Rewind():
            t = _on_rewind(state, input)
        case SummaryDone():
            t = _on_summary_done(state, input)
        case SummaryFailed():
            t = _on_summary_failed(state, input)
        case Compact():
            t = _on_compact(state)
        case _:
            assert_never(input)
    after = t.state.committed.log
    if after is before:
        return t
    # The log only grows: what this transition appended is its new tail.
    return _replace(t, appended=after[len(before) :])


# -- common pieces -------------------------------------------------------------------------


def _ignore(state: RuntimeState) -> Transition:
    return Transition(state, (), WAIT_INPUT)


def _commit(c: ConversationState, **changes: Any) -> ConversationState:
    """The next committed state: `changes` applied and a new commit id (O(fields))."""
    n = c.commit + 1
    return _replace(c, commit=n, last_commit_id=ids.commit_id(c.conversation_id, n), **changes)


def _with(c: ConversationState, *messages: Message) -> ConversationState:
    """`c` with `messages` appended to the log and to the active history (uncommitted)."""
    if not messages:
        return c
    log = (*c.log, *messages)
    active = log if c.messages is c.log else (*c.messages, *messages)
    return _replace(c, log=log, messages=active)


def _settle(
    c: ConversationState,
    emit: tuple[ResponseEvent, ...],
    command: Command,
    *,
    local: tuple[LocalResult, ...] = (),
    call_end: CallEnd | None = None,
) -> Transition:
    return Transition(
        RuntimeState(committed=c), emit, command, local_results=local, call_end=call_end
    )


def _prepend(
    emit: tuple[ResponseEvent, ...], t: Transition, call_end: CallEnd | None = None
) -> Transition:
    if not emit and call_end is None:
        return t
    return _replace(t, emit=emit + t.emit, call_end=call_end or t.call_end)


def _context(c: ConversationState) -> TurnContext:
    return c.context if c.context is not None else DEFAULT_CONTEXT


def _fail(
    c: ConversationState,
    message: AssistantMessage,
    emit: tuple[ResponseEvent, ...] = (),
    call_end: CallEnd | None = None,
    kind: FailureKind = FailureKind.PROVIDER,
) -> Transition:
    c2 = _commit(c, status=Status.FAILED, waiting=None, queued=(), queued_context=None)
    return _settle(c2, emit, Failed(message=message, kind=kind), call_end=call_end)


def _flush_queue(c: ConversationState) -> ConversationState:
    """Steering: the queued user messages join the history before the turn's next model call,
    and the context a queued follow-up brought applies from that call on."""
    if not c.queued and c.queued_context is None:
        return c
    c = _with(c, *c.queued)
    context = c.queued_context if c.queued_context is not None else c.context
    return _replace(c, queued=(), queued_context=None, context=context)


def _call_llm(c: ConversationState, *, compacted: bool = False, measure: bool = True) -> Transition:
    """Issue the next LLM call of the turn over the active history (or fail the turn when the
    per-turn call budget is spent). `c` carries the uncommitted changes of this transition.

    When the request would pass the window's threshold, a compaction runs first (its summary
    call, then this call over the compacted view). `compacted`: one just ran for this call; a
    request still over the threshold then fails the turn (never a second compaction in a row).
    `measure` False: go out whatever the estimate (a compaction that failed before the window
    was full).
    """
    context = _context(c)
    if c.llm_calls >= context.max_llm_calls:
        return _fail(
            c,
            loop_failure(
                f"stopped: this turn reached the limit of {context.max_llm_calls} model calls "
                "(max_llm_calls)"
            ),
        )
    system_prompt = render_prompt(context)
    tools = render_tools(context)
    window = context.window
    if window is not None and measure:
        fixed = compaction.fixed_tokens(system_prompt, tools)
        estimate = compaction.estimated_tokens(c.messages, c.fresh_from, fixed)
        if estimate + window.output_reserve > int(window.threshold * window.tokens):
            if compacted:
                too_big = compaction.TooBig(
                    window=window.tokens, budget=window.budget, fixed=fixed, tail=estimate - fixed
                )
                return _fail(c, loop_failure(too_big.message()), kind=FailureKind.BAD_REQUEST)
            return _compact(
                c, CompactionReason.THRESHOLD, AfterSummary.CALL_LLM, window, fixed, estimate
            )
    n = c.llm_calls + 1
    call = ids.call_id(c.turn_id, n)
    request = RequestMessages(system_prompt=system_prompt, messages=c.messages, tools=tools)
    digest = messages_hash(c.messages)
    c2 = _commit(
        c,
        llm_calls=n,
        status=Status.WAITING_LLM,
        waiting=AwaitLLM(call_id=call, messages_hash=digest, compacted=compacted),
    )
    command = CallLLM(
        call_id=call,
        request=request,
        messages_hash=digest,
        catalogue_version=catalogue.CATALOGUE_VERSION,
        prompt=prompt_chars(request, context),
    )
    return _settle(c2, (), command)


def _request(c: ConversationState, context: TurnContext) -> RequestMessages:
    return RequestMessages(
        system_prompt=render_prompt(context),
        messages=c.messages,
        tools=render_tools(context),
    )


def _fall_back(c: ConversationState, waiting: AwaitLLM, end: CallEnd) -> Transition | None:
    """The same step of the turn on the next of the context's fallback models, after call
    `waiting` failed before its first output; None when no fallback is left.

    The history has not moved since that call was made (steering waits in `queued`), so the
    request is the same messages, prompt and tools, sent as a new call to another model. Not
    counted in `max_llm_calls`: the turn is still at the same step. The turn's next call goes
    back to the run's own model."""
    context = _context(c)
    k = waiting.fallback + 1
    if k > len(context.fallbacks):
        return None
    call = ids.fallback_call_id(ids.call_id(c.turn_id, c.llm_calls), k)
    request = _request(c, context)
    c2 = _commit(
        c,
        waiting=AwaitLLM(
            call_id=call,
            messages_hash=waiting.messages_hash,
            fallback=k,
            compacted=waiting.compacted,  # still no second compaction in a row
        ),
    )
    command = CallLLM(
        call_id=call,
        request=request,
        messages_hash=waiting.messages_hash,
        catalogue_version=catalogue.CATALOGUE_VERSION,
        prompt=prompt_chars(request, context),
        model=context.fallbacks[k - 1],
        fallback_of=waiting.call_id,
    )
    return _settle(c2, (), command, call_end=end)


def _model_of(c: ConversationState, waiting: AwaitLLM) -> str:
    """The model call `waiting` went to: "" for the run's own, else its fallback's id."""
    fallbacks = _context(c).fallbacks
    return fallbacks[waiting.fallback - 1] if 0 < waiting.fallback <= len(fallbacks) else ""


def opening_message(context: TurnContext, user_message: LLMUserMessage) -> LLMUserMessage:
    """The one message that opens a turn: supplements as text parts, then the user's parts."""
    if not context.supplements:
        return user_message
    parts = tuple(TextContent(text=s) for s in context.supplements)
    return LLMUserMessage(content=parts + user_message.content)


def _without_supplements(context: TurnContext) -> TurnContext:
    # Supplements belong to the opening message of their turn only.
    return _replace(context, supplements=()) if context.supplements else context


def _begin_turn(c: ConversationState, context: TurnContext, message: LLMUserMessage) -> Transition:
    turn = c.turn + 1
    c2 = _replace(
        _with(c, message),
        turn=turn,
        turn_id=ids.turn_id(c.conversation_id, turn),
        context=_without_supplements(context),
        llm_calls=0,
        waiting=None,
        queued=(),
        queued_context=None,
    )
    return _call_llm(c2)


def _close_turn(
    c: ConversationState, reason: str
) -> tuple[ConversationState, tuple[LocalResult, ...], CallEnd | None]:
    """End the turn in progress (uncommitted): every tool call of the current message without a
    result gets one (an early result if one arrived, else "canceled"), in call order, so the
    history keeps a valid call/result pairing; a model call in flight ends canceled. Partial
    model output is never appended."""
    waiting = c.waiting
    if c.status == Status.WAITING_CLIENT and isinstance(waiting, AwaitClient):
        early = list(waiting.early)
        closing: list[ToolResultMessage] = []
        local: list[LocalResult] = []
        for call in waiting.calls[waiting.next :]:
            found = _take_early(early, call.id)
            if found is None:
                found = error_result(call, CANCELED_RESULT_TEXT)
                index = _content_index(c.messages, call.id)
                local.append(LocalResult(call, waiting.call_id, index, found))
            closing.append(found)
        return _with(c, *closing), tuple(local), None
    if c.status == Status.WAITING_LLM and isinstance(waiting, AwaitLLM):
        return c, (), CallEnd(waiting.call_id, CallOutcome.CANCELED, reason)
    if c.status == Status.SUMMARIZING and isinstance(waiting, AwaitSummary):
        # The summary is dropped; the history stays as it was, unsummarized.
        return c, (), CallEnd(waiting.call_id, CallOutcome.CANCELED, reason)
    return c, (), None


# -- Start / UserMessage -------------------------------------------------------------------


def _on_start(state: RuntimeState, input: Start) -> Transition:
    """A run request. A conversation still busy with a turn of a run that is gone (or that was
    told to give way, see Supersede) has that turn closed first: a newer run supersedes the
    busy one and starts from the committed state."""
    c = state.committed
    call_end: CallEnd | None = None
    if c.busy:
        # Closed without cards: the tool calls belonged to another run's client stream.
        c, _, call_end = _close_turn(c, CALL_SUPERSEDED)
    if not c.log and input.history:
        c = _with(c, *input.history)
    if c.commit == 0 and c.log:  # the client's history and list, for a conversation new to us
        c = _replace(c, todos=input.todos, todo_seed=input.todos, todo_from=len(c.log))
    elif c.commit == 0 and input.todos:
        c = _replace(c, todos=input.todos, todo_seed=input.todos)
    message = input.user_message
    if input.build is not None:
        message = build_message(derived.plan_to_build(c, input.build))
    t = _begin_turn(c, input.context, opening_message(input.context, message))
    return _prepend((), t, call_end)


def _on_note(state: RuntimeState, input: Note) -> Transition:
    """A note from outside a turn: appended to the history (a busy turn of a run that is gone
    is closed first, as for Start); no model call; the run ends with an empty answer that is
    not appended. The conversation is then FINAL, so a replay of this input ends the same way.
    """
    c = state.committed
    call_end: CallEnd | None = None
    if c.busy:
        c, _, call_end = _close_turn(c, CALL_SUPERSEDED)
    c2 = _commit(
        _with(c, input.message), status=Status.FINAL, waiting=None, queued=(), queued_context=None
    )
    return _settle(c2, (), Final(message=loop_answer("")), call_end=call_end)


def _follow_up_context(c: ConversationState, input: UserMessage) -> TurnContext | None:
    """The context a follow-up asks for, or None when it asks for nothing new."""
    if input.context is None and input.mode is None:
        return None
    base = input.context
    if base is None:
        base = c.queued_context if c.queued_context is not None else _context(c)
    if input.mode is not None and input.mode != base.mode:
        base = _replace(base, mode=input.mode)
    return base


def _on_user_message(state: RuntimeState, input: UserMessage) -> Transition:
    c = state.committed
    asked = _follow_up_context(c, input)
    context = asked if asked is not None else _context(c)
    message = opening_message(context, input.message)
    if c.busy:  # steering: joins the history before the turn's next model call
        c2 = _commit(
            c,
            queued=(*c.queued, message),
            queued_context=(_without_supplements(asked) if asked is not None else c.queued_context),
        )
        return Transition(RuntimeState(c2, state.pending_response), (), WAIT_INPUT)
    return _begin_turn(c, context, message)


# -- LLM events ----------------------------------------------------------------------------


def _on_llm_event(state: RuntimeState, input: LLMEvent) -> Transition:
    c = state.committed
    waiting = c.waiting
    if c.status != Status.WAITING_LLM or not isinstance(waiting, AwaitLLM):
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
            return _on_done(c, waiting, pending, event)
        case ErrorEvent():
            return _on_error(c, waiting, pending, event)
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


def _on_done(
    c: ConversationState,
    waiting: AwaitLLM,
    pending: PendingResponse | None,
    event: DoneEvent,
) -> Transition:
    message = event.message
    problem = validate_response(message, pending)
    if problem is not None:
        failed = _replace(
            message,
            stop_reason="error",
            error_message=f"invalid response from the model: {problem}",
        )
        end = CallEnd(waiting.call_id, CallOutcome.FAILED, failed.error_message)
        return _fail(c, failed, (ErrorEvent(reason="error", message=failed),), end)
    emit: tuple[ResponseEvent, ...] = (event,)
    done = CallEnd(waiting.call_id, CallOutcome.COMMITTED)
    calls = message.tool_calls
    if calls:
        c2 = _replace(
            _with(c, message),
            status=Status.WAITING_CLIENT,
            waiting=AwaitClient(call_id=waiting.call_id, calls=calls, next=0, operation_id=""),
        )
        return _prepend(emit, _advance(c2), done)
    if c.queued:  # steering: the user spoke while the model was answering
        c2 = _replace(_flush_queue(_with(c, message)), waiting=None)
        return _prepend(emit, _call_llm(c2), done)
    c2 = _commit(_with(c, message), status=Status.FINAL, waiting=None, queued_context=None)
    return _settle(c2, emit, Final(message=message), call_end=done)


def _on_error(
    c: ConversationState, waiting: AwaitLLM, pending: PendingResponse | None, event: ErrorEvent
) -> Transition:
    """A failed call fails the turn, unless the provider refused it for being over its
    context window (then one compaction, and a new call over the compacted view), or it
    failed before its first output (a lone `error`: no `start`, so the client saw nothing of
    it; its retries are behind it) and a fallback model is left: then that model gets the
    same step, and the client sees only the fallback's answer. Once a call has output, no
    fallback follows it."""
    if event.reason == "aborted":
        c2 = _commit(c, status=Status.CANCELED, waiting=None, queued=(), queued_context=None)
        end = CallEnd(waiting.call_id, CallOutcome.CANCELED, event.error_message)
        return _settle(c2, (event,), Canceled(reason=event.error_message), call_end=end)
    end = CallEnd(waiting.call_id, CallOutcome.FAILED, event.error_message)
    if event.kind == ErrorKind.CONTEXT_LENGTH and not waiting.compacted:
        # Over the window by the provider's count: compact once, then a new call (new id,
        # new request) over the compacted view. A second refusal fails the turn.
        context = _context(c)
        window = context.window or _fallback_window()
        fixed = compaction.fixed_tokens(render_prompt(context), render_tools(context))
        estimate = compaction.estimated_tokens(c.messages, c.fresh_from, fixed)
        t = _compact(c, CompactionReason.OVERFLOW, AfterSummary.CALL_LLM, window, fixed, estimate)
        return _prepend((), t, end)
    # Before its first output (a lone error): the next fallback model, if one is left.
    if pending is None or pending.call_id != waiting.call_id:
        fallback = _fall_back(c, waiting, end)
        if fallback is not None:
            return fallback
    return _fail(c, event.message, (event,), end)


# -- tool calls ----------------------------------------------------------------------------


def _content_index(messages: tuple[Message, ...], tool_call_id: str) -> int:
    """Where the call sits in the assistant message that made it (the latest one)."""
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            for i, block in enumerate(message.content):
                if isinstance(block, ToolCall) and block.id == tool_call_id:
                    return i
            return 0
    return 0


def _advance(c: ConversationState, local: tuple[LocalResult, ...] = ()) -> Transition:
    """Answer what can be answered without the client, from `waiting.next` on, in call order;
    then either send the next call to the client or, all answered, call the LLM again."""
    waiting = c.waiting
    assert isinstance(waiting, AwaitClient)
    early = list(waiting.early)
    context = _context(c)
    names = tuple(t.name for t in render_tools(context))
    refused = catalogue.refused(catalogue.mode_of(context.mode))
    added: list[Message] = []
    answered = list(local)
    todo_list = c.todos
    i = waiting.next
    while i < len(waiting.calls):
        call = waiting.calls[i]
        result = _take_early(early, call.id)
        if result is None:
            result = synthetic_result(call, names, refused, context.mode)
            update: TodoUpdate | None = None
            if result is None and call.name == todos.TODO_WRITE:
                done = todos.write(todo_list, call)
                if isinstance(done, tuple):
                    update, result = done
                    todo_list = update.todos
                else:
                    result = done
            if result is not None:
                index = _content_index(c.messages, call.id)
                answered.append(LocalResult(call, waiting.call_id, index, result, update))
        if result is None:
            op = ids.operation_id(waiting.call_id, call.id)
            c2 = _commit(
                _with(c, *added),
                todos=todo_list,
                status=Status.WAITING_CLIENT,
                waiting=_replace(waiting, next=i, operation_id=op, early=tuple(early)),
            )
            command = CallClient(
                operation_id=op,
                tool_call=call,
                llm_call_id=waiting.call_id,
                content_index=_content_index(c.messages, call.id),
            )
            return _settle(c2, (), command, local=tuple(answered))
        added.append(result)
        i += 1
    if waiting.ends_turn and not c.queued:
        # The turn ends here without another model call (CreatePlan); the answer it ends with
        # is the message that made the calls.
        last = next((m for m in reversed(c.messages) if isinstance(m, AssistantMessage)), None)
        answer = last if last is not None else loop_failure("")
        c2 = _commit(
            _with(c, *added),
            status=Status.FINAL,
            waiting=None,
            queued_context=None,
            todos=todo_list,
        )
        return _settle(c2, (), Final(message=answer), local=tuple(answered))
    c2 = _replace(_flush_queue(_with(c, *added)), waiting=None, todos=todo_list)
    return _replace(_call_llm(c2), local_results=tuple(answered))


def _take_early(early: list[ToolResultMessage], tool_call_id: str) -> ToolResultMessage | None:
    for k, result in enumerate(early):
        if result.tool_call_id == tool_call_id:
            return early.pop(k)
    return None


def _on_tool_result(state: RuntimeState, input: ToolResult) -> Transition:
    c = state.committed
    waiting = c.waiting
    if c.status != Status.WAITING_CLIENT or not isinstance(waiting, AwaitClient):
        return _ignore(state)
    result = input.message
    index = next(
        (k for k, call in enumerate(waiting.calls) if call.id == result.tool_call_id), None
    )
    if index is None or index < waiting.next:  # unknown, or already answered
        return _ignore(state)
    call = waiting.calls[index]
    if call.name in LOCAL_TOOL_NAMES:  # the loop answers these; a client's answer is stray
        return _ignore(state)
    if result.tool_name != call.name:  # the pairing is by id; keep the name the model used
        result = _replace(result, tool_name=call.name)
    if index > waiting.next:  # a later call answered first: keep it until its turn
        if any(r.tool_call_id == result.tool_call_id for r in waiting.early):
            return _ignore(state)
        c2 = _commit(c, waiting=_replace(waiting, early=(*waiting.early, result)))
        return Transition(RuntimeState(c2, state.pending_response), (), WAIT_INPUT)
    c2 = _replace(_with(c, result), waiting=_replace(waiting, next=index + 1))
    if input.effect is not None and not result.is_error:
        c2 = _apply_effect(c2, input.effect)
    return _advance(c2)


def _apply_effect(c: ConversationState, effect: ToolEffect) -> ConversationState:
    """What an answered call changes besides the history (uncommitted).

    - A created plan is recorded (a later Build finds it) and the turn ends once every call of
      the message is answered: the user reviews the plan and presses Build (reference §3.1).
    - An approved mode switch changes the turn's mode at once: the next model call of this very
      turn is built with the new mode's prompt and tools (reference §3.3)."""
    waiting = c.waiting
    assert isinstance(waiting, AwaitClient)
    match effect:
        case PlanCreated(plan=plan, uri=uri, name=name, overview=overview):
            keep = c.plan.name if c.plan is not None and not name else name
            record = PlanRecord(text=plan, uri=uri, name=keep, overview=overview)
            mark = PlanMark(at=len(c.log) - 1, plan=record)  # the result is the log's last
            return _replace(
                c,
                plan=record,
                plans=(*c.plans, mark),
                waiting=_replace(waiting, ends_turn=True),
            )
        case ModeSwitched(mode=mode):
            context = _context(c)
            if context.mode == mode:
                return c
            return _replace(c, context=_replace(context, mode=mode))
        case _:
            assert_never(effect)


def _on_tool_lost(state: RuntimeState, input: ToolLost) -> Transition:
    """The awaited operation will not be answered. A timed-out call, and a lost call that may
    have changed something, get an error result saying so (never run twice); a lost call
    without side effects is simply sent again."""
    c = state.committed
    waiting = c.waiting
    if (
        c.status != Status.WAITING_CLIENT
        or not isinstance(waiting, AwaitClient)
        or waiting.operation_id != input.operation_id
    ):
        return _ignore(state)
    call = waiting.calls[waiting.next]
    if input.cause == LostCause.TIMED_OUT:
        result = timed_out_result(call, input.waited_ms)
    elif side_effects(call.name):
        result = unknown_outcome_result(call)
    else:
        return Transition(state, (), _call_client(c, waiting))
    local = LocalResult(call, waiting.call_id, _content_index(c.messages, call.id), result)
    c2 = _replace(_with(c, result), waiting=_replace(waiting, next=waiting.next + 1))
    return _advance(c2, (local,))


def _call_client(c: ConversationState, waiting: AwaitClient) -> CallClient:
    call = waiting.calls[waiting.next]
    return CallClient(
        operation_id=waiting.operation_id,
        tool_call=call,
        llm_call_id=waiting.call_id,
        content_index=_content_index(c.messages, call.id),
    )


# -- Cancel / Supersede --------------------------------------------------------------------


def _on_cancel(state: RuntimeState, reason: str, *, cards: bool, call_reason: str) -> Transition:
    """Ends in Canceled from every status; the pending response is discarded and the queue
    dropped. A newer run request for the conversation (Supersede) ends the run the same way:
    the new run then starts from the committed state; so does a client whose stream is gone
    for good (ClientGone). A call in flight ends with `call_reason` as its record's reason."""
    c = state.committed
    command = Canceled(reason=reason)
    if c.status == Status.CANCELED and state.pending_response is None:
        return Transition(state, (), command)
    closed, local, call_end = _close_turn(c, call_reason)
    c2 = _commit(closed, status=Status.CANCELED, waiting=None, queued=(), queued_context=None)
    return _settle(c2, (), command, local=local if cards else (), call_end=call_end)


def _on_suspend(state: RuntimeState, cause: SuspendCause) -> Transition:
    """The run stops without deciding the turn: nothing is committed (a reopened run resumes
    it from the committed state, an interrupted call sent again from its stored bytes); the
    model or summary call in flight ends, canceled with `cause` as its reason."""
    match cause:
        case SuspendCause.SHUTDOWN:
            reason = CALL_SHUTDOWN
        case SuspendCause.MOVED:
            reason = CALL_MOVED
        case _:
            assert_never(cause)
    c = state.committed
    waiting = c.waiting
    call_end: CallEnd | None = None
    if (c.status == Status.WAITING_LLM and isinstance(waiting, AwaitLLM)) or (
        c.status == Status.SUMMARIZING and isinstance(waiting, AwaitSummary)
    ):
        call_end = CallEnd(waiting.call_id, CallOutcome.CANCELED, reason)
    return Transition(state, (), Canceled(reason=reason), call_end=call_end)


# -- Resume --------------------------------------------------------------------------------


def _on_resume(state: RuntimeState, input: Resume) -> Transition:
    """Continue from the committed state. A run that was driving another turn than the
    conversation's current one lost it to another request and ends canceled."""
    c = state.committed
    if input.turn_id is not None and input.turn_id != c.turn_id:
        return Transition(state, (), Canceled(reason=CONTINUED_ELSEWHERE))
    waiting = c.waiting
    match c.status:
        case Status.WAITING_LLM:
            assert isinstance(waiting, AwaitLLM)
            command: Command = ResendLLM(
                call_id=waiting.call_id,
                messages_hash=waiting.messages_hash,
                model=_model_of(c, waiting),
            )
            return Transition(state, (), command)
        case Status.WAITING_CLIENT:
            assert isinstance(waiting, AwaitClient)
            return _resume_tool(state, waiting, input)
        case Status.FINAL:
            last = c.messages[-1] if c.messages else None
            answer = last if isinstance(last, AssistantMessage) else loop_failure("")
            return Transition(state, (), Final(message=answer, replay=True))
        case Status.FAILED:
            failure = loop_failure("the previous attempt of this turn failed")
            return Transition(state, (), Failed(message=failure))
        case Status.CANCELED:
            return Transition(state, (), Canceled(reason="the turn was canceled"))
        case Status.READY:
            failure = loop_failure("there is nothing to resume")
            return Transition(state, (), Failed(message=failure, kind=FailureKind.BAD_REQUEST))
        case Status.SUMMARIZING:
            # The same summary call again (the same request; the runtime resends its stored
            # bytes): its answer is applied once, by its input id.
            assert isinstance(waiting, AwaitSummary)
            return Transition(state, (), _summarize_command(c, waiting))
        case _:
            assert_never(c.status)


def _resume_tool(state: RuntimeState, waiting: AwaitClient, input: Resume) -> Transition:
    op = input.operation
    if op is None or op.operation_id != waiting.operation_id:
        # Never recorded as sent: send it now.
        return Transition(state, (), _call_client(state.committed, waiting))
    if op.result is not None:  # answered, but the answer's commit was lost
        return _on_tool_result(state, ToolResult(message=op.result))
    if op.sent:
        lost = ToolLost(operation_id=op.operation_id, cause=LostCause.ANSWER_LOST)
        return _on_tool_lost(state, lost)
    return Transition(state, (), _call_client(state.committed, waiting))


# -- Rewind --------------------------------------------------------------------------------


def _on_rewind(state: RuntimeState, input: Rewind) -> Transition:
    """The client went back to an earlier turn: that turn's view becomes the active history
    again, followed by whatever is appended from now on. Nothing is deleted: the abandoned
    messages stay in the log. A conversation busy with a turn is not rewound."""
    c = state.committed
    if c.busy:
        return _ignore(state)
    problem = view.problem(input.view, len(c.log))
    if problem is not None:
        raise LoopError(f"cannot rewind conversation {c.conversation_id!r}: {problem}")
    restored = view.reopened(input.view, len(c.log))
    if view.closed(restored, len(c.log)) == view.closed(c.view, len(c.log)):
        return _ignore(state)  # already there
    messages = view.materialize(restored, c.log)
    c2 = _commit(
        c,
        view=restored,
        messages=messages,
        fresh_from=derived.fresh_from(c, restored),  # a turn of another epoch, or none
        todos=derived.todos_in_view(c, restored),  # the list as it was at the kept turn
        plan=derived.plan_in_view(c, restored),  # and the plan
        status=Status.READY,
        waiting=None,
        queued=(),
        queued_context=None,
    )
    return _settle(c2, (), WAIT_INPUT)


# -- compaction ----------------------------------------------------------------------------


def _fallback_window() -> ContextWindow:
    """The budget of a run whose model gave none (a test's context): a common window."""
    return ContextWindow(tokens=128_000)


def _first_summarizable(c: ConversationState) -> int:
    # A history that starts with an earlier summary: summarizing only that would shrink nothing.
    return 1 if derived.epoch_of(c, c.view) is not None else 0


def _compact(
    c: ConversationState,
    reason: CompactionReason,
    then: AfterSummary,
    window: ContextWindow,
    fixed: int,
    estimate: int,
) -> Transition:
    """Start a compaction: plan the cut and make the summary call (or, when even the smallest
    tail does not fit, fail the turn with what fills the window)."""
    planned = compaction.plan_cut(
        c.messages, fixed=fixed, window=window, first=_first_summarizable(c)
    )
    if isinstance(planned, compaction.TooBig):
        return _fail(c, loop_failure(planned.message()), kind=FailureKind.BAD_REQUEST)
    return _summarize(c, planned, reason, then, estimate)


def _summarize(
    c: ConversationState, cut: int, reason: CompactionReason, then: AfterSummary, estimate: int
) -> Transition:
    n = c.llm_calls + 1
    waiting = AwaitSummary(
        call_id=ids.summary_call_id(c.turn_id, n),
        cut=cut,
        reason=reason,
        then=then,
        tokens_before=estimate,
    )
    c2 = _commit(c, llm_calls=n, status=Status.SUMMARIZING, waiting=waiting)
    return _settle(c2, (), _summarize_command(c2, waiting))


def _summarize_command(c: ConversationState, waiting: AwaitSummary) -> Summarize:
    window = _context(c).window or _fallback_window()
    request = compaction.summary_request(c.messages[: waiting.cut], window)
    return Summarize(
        call_id=waiting.call_id, request=request, messages_hash=messages_hash(request.messages)
    )


def _awaited_summary(state: RuntimeState, call_id: str) -> AwaitSummary | None:
    c = state.committed
    waiting = c.waiting
    if c.status != Status.SUMMARIZING or not isinstance(waiting, AwaitSummary):
        return None
    return waiting if waiting.call_id == call_id else None


def _on_summary_done(state: RuntimeState, input: SummaryDone) -> Transition:
    """The summary is in: it is appended to the log and a new epoch of the view begins (the
    summary, the kept tail, then what comes next); nothing is removed from the log."""
    waiting = _awaited_summary(state, input.call_id)
    if waiting is None:
        return _ignore(state)
    text = input.message.text.strip()
    if not text:
        failed = _replace(input.message, error_message="the summary call answered no text")
        return _on_summary_failed(state, SummaryFailed(call_id=input.call_id, message=failed))
    c = state.committed
    context = _context(c)
    at = len(c.log)
    summary = compaction.summary_message(text)
    tail = c.messages[waiting.cut :]
    epoch = (view.Span(at, at + 1), *view.suffix(c.view, at, waiting.cut), view.Span(at + 1))
    messages = (summary, *tail)
    fixed = compaction.fixed_tokens(render_prompt(context), render_tools(context))
    after = compaction.estimated_tokens(messages, len(messages), fixed)
    mark = CompactionMark(
        at=at,
        kept=len(tail),
        reason=waiting.reason,
        tokens_before=waiting.tokens_before,
        tokens_after=after,
        call_id=waiting.call_id,
        todos=c.todos,
        plan=c.plan,
    )
    c2 = _replace(
        c,
        log=(*c.log, summary),
        messages=messages,
        view=epoch,
        compactions=(*c.compactions, mark),
        fresh_from=len(messages),
        waiting=None,
    )
    done = Compacted(
        reason=waiting.reason,
        summary=text,
        call_id=waiting.call_id,
        tokens_before=waiting.tokens_before,
        tokens_after=after,
        summarized=waiting.cut,
        kept=len(tail),
    )
    end = CallEnd(waiting.call_id, CallOutcome.COMMITTED)
    match waiting.then:
        case AfterSummary.CALL_LLM:
            t = _call_llm(c2, compacted=True)
        case AfterSummary.END:
            t = _ended_quietly(c2)
        case _:
            assert_never(waiting.then)
    return _replace(t, call_end=end, compacted=done)


def _ended_quietly(c: ConversationState) -> Transition:
    c2 = _commit(c, status=Status.FINAL, waiting=None, queued=(), queued_context=None)
    return _settle(c2, (), Final(message=loop_answer("")))


def _on_summary_failed(state: RuntimeState, input: SummaryFailed) -> Transition:
    """The summary call failed. Before a threshold compaction the request still fits the window,
    so the turn goes on without one (that call then fails rather than compacts if the provider
    refuses it); an overflow or a /summarize fails the turn, saying why."""
    waiting = _awaited_summary(state, input.call_id)
    if waiting is None:
        return _ignore(state)
    c = _replace(state.committed, waiting=None)
    why = input.message.error_message or "the summary call failed"
    end = CallEnd(waiting.call_id, CallOutcome.FAILED, why)
    match waiting.reason:
        case CompactionReason.THRESHOLD:
            t = _call_llm(c, compacted=True, measure=False)
        case CompactionReason.OVERFLOW:
            t = _fail(
                c,
                loop_failure(
                    "the conversation is over the model's context window and compacting it "
                    f"failed: {why}"
                ),
            )
        case CompactionReason.REQUESTED:
            t = _fail(c, loop_failure(f"the conversation could not be summarized: {why}"))
        case _:
            assert_never(waiting.reason)
    return _replace(t, call_end=end)


def _on_compact(state: RuntimeState) -> Transition:
    """/summarize: compact now, keeping the last user message and what follows it. A busy turn
    of a run that is gone is closed first, as for Start. With nothing to compact the run ends
    at once, and says so (`compacted` without a call)."""
    c = state.committed
    call_end: CallEnd | None = None
    if c.busy:
        c, _, call_end = _close_turn(c, CALL_SUPERSEDED)
    cut = compaction.requested_cut(c.messages, _first_summarizable(c))
    if cut is None and c.commit == 0:
        # A conversation this server never saw: nothing is committed, so its first turn still
        # takes the history the client holds.
        return Transition(
            state,
            (),
            Final(message=loop_answer("")),
            compacted=Compacted(reason=CompactionReason.REQUESTED),
        )
    if cut is None:
        t = _replace(
            _ended_quietly(_replace(c, waiting=None)),
            compacted=Compacted(reason=CompactionReason.REQUESTED),
        )
        return _prepend((), t, call_end)
    context = _context(c)
    fixed = compaction.fixed_tokens(render_prompt(context), render_tools(context))
    estimate = compaction.estimated_tokens(c.messages, c.fresh_from, fixed)
    t = _summarize(
        _replace(c, waiting=None), cut, CompactionReason.REQUESTED, AfterSummary.END, estimate
    )
    return _prepend((), t, call_end)
