"""The events of the model call in flight: counters while it streams, then its answer (`done`)
or its failure (`error`: a compaction, a fallback, or the turn fails)."""

from __future__ import annotations

from typing import assert_never

import msgspec

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
from cursor_byok.llm.types import AssistantMessage

from . import compaction
from . import window as window_rule
from .commands import CONTINUE_LLM, Canceled, Final
from .images import after_queue, on_describing_event
from .inputs import LLMEvent
from .meter import prompt_tokens
from .model_calls import compact, fall_back, fallback_window
from .prompt import render_prompt, render_tools
from .results import validate_response
from .state import (
    AfterSummary,
    AwaitClient,
    AwaitLLM,
    BlockKind,
    CompactionReason,
    ConversationState,
    MeterBasis,
    PendingResponse,
    RuntimeState,
    Status,
    _KindNode,
)
from .step import (
    CallEnd,
    CallOutcome,
    Ignored,
    Transition,
    WindowReport,
    commit,
    context_of,
    fail,
    ignore,
    prepend,
    settle,
    with_checkpoint,
    with_messages,
)
from .tool_phase import advance

_replace = msgspec.structs.replace


def on_llm_event(state: RuntimeState, input: LLMEvent) -> Transition:
    c = state.committed
    waiting = c.waiting
    if c.status != Status.WAITING_LLM or not isinstance(waiting, AwaitLLM):
        return ignore(state, Ignored.NOT_AWAITED)
    if input.call_id != waiting.call_id:
        return ignore(state, Ignored.OTHER_CALL)
    event = input.event
    if waiting.describing is not None:  # pasted images described for a text-only model
        return on_describing_event(state, waiting, waiting.describing, event)
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
        return fail(c, failed, (ErrorEvent(reason="error", message=failed),), end)
    t = _answered(c, waiting, message, event)
    window = context_of(c).window
    used = message.usage.total
    if window is None or waiting.fallback or not window_rule.silently_over(window, used):
        return t
    said = (
        f"the provider answered a request whose usage is {used:,} tokens, more than the "
        f"window of {window.size:,}"
    )
    return _replace(t, window_report=WindowReport(said=said, used=used, window=window.size))


def _answered(
    c: ConversationState, waiting: AwaitLLM, message: AssistantMessage, event: DoneEvent
) -> Transition:
    emit: tuple[ResponseEvent, ...] = (event,)
    done = CallEnd(waiting.call_id, CallOutcome.COMMITTED)
    if waiting.prompt is not None:  # the meter of this call: what the checkpoints show now
        basis = MeterBasis(chars=waiting.prompt, used=prompt_tokens(message.usage))
        c = _replace(c, meter_basis=basis)
    calls = message.tool_calls
    if calls:
        c2 = _replace(
            with_messages(c, message),
            status=Status.WAITING_CLIENT,
            waiting=AwaitClient(call_id=waiting.call_id, calls=calls, next=0, operation_id=""),
        )
        return with_checkpoint(prepend(emit, advance(c2), done))
    if c.queued:  # steering: the user spoke while the model was answering
        c2 = _replace(with_messages(c, message), waiting=None)
        return with_checkpoint(prepend(emit, after_queue(c2), done))
    c2 = commit(with_messages(c, message), status=Status.FINAL, waiting=None, queued_context=None)
    return settle(c2, emit, Final(message=message), call_end=done)


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
        c2 = commit(c, status=Status.CANCELED, waiting=None, queued=(), queued_context=None)
        end = CallEnd(waiting.call_id, CallOutcome.CANCELED, event.error_message)
        return settle(c2, (event,), Canceled(reason=event.error_message), call_end=end)
    end = CallEnd(waiting.call_id, CallOutcome.FAILED, event.error_message)
    if event.kind == ErrorKind.CONTEXT_LENGTH and not waiting.compacted:
        # Over the window by the provider's count: compact once, to fit the window it gave
        # when it gave one, then a new call (new id, new request) over the compacted view.
        # A second refusal fails the turn.
        context = context_of(c)
        window = context.window or fallback_window()
        fixed = compaction.fixed_tokens(render_prompt(context), render_tools(context))
        estimate = compaction.estimated_tokens(c.messages, c.fresh_from, fixed)
        limit = event.context_limit
        report: WindowReport | None = None
        if waiting.fallback == 0:  # a fallback model's window is not the run's model's
            learned = window_rule.with_provider_window(window, limit)
            if learned is not window:
                report = WindowReport(
                    said=event.error_message,
                    tokens=learned.provider_tokens,
                    window=window.size,
                )
                window = learned
                c = _replace(c, context=_replace(context, window=learned))
        scale = window_rule.scale(limit, estimate)
        t = compact(
            c, CompactionReason.OVERFLOW, AfterSummary.CALL_LLM, window, fixed, estimate, scale
        )
        return _replace(prepend((), t, end), window_report=report)
    # Before its first output (a lone error): the next fallback model, if one is left.
    if pending is None or pending.call_id != waiting.call_id:
        fallback = fall_back(c, waiting, end)
        if fallback is not None:
            return fallback
    return fail(c, event.message, (event,), end)
