"""The compaction's rules once its summary call is made: the summary in (a new epoch of the
view), the summary call failed, and the user's /summarize."""

from __future__ import annotations

from typing import assert_never

import msgspec

from . import compaction, view
from . import window as window_rule
from .commands import Final
from .inputs import SummaryDone, SummaryFailed
from .model_calls import call_llm, first_summarizable, summarize
from .prompt import render_prompt, render_tools
from .results import CALL_SUPERSEDED, loop_answer, loop_failure
from .state import (
    AfterSummary,
    AwaitSummary,
    CompactionMark,
    CompactionReason,
    ConversationState,
    RuntimeState,
    Status,
)
from .step import (
    CallEnd,
    CallOutcome,
    Compacted,
    Ignored,
    Transition,
    commit,
    context_of,
    fail,
    ignore,
    prepend,
    settle,
)
from .turns import close_turn

_replace = msgspec.structs.replace


def _awaited_summary(state: RuntimeState, call_id: str) -> AwaitSummary | Ignored:
    """The summary call `call_id` the conversation waits on, else why the input is ignored."""
    c = state.committed
    waiting = c.waiting
    if c.status != Status.SUMMARIZING or not isinstance(waiting, AwaitSummary):
        return Ignored.NOT_AWAITED
    return waiting if waiting.call_id == call_id else Ignored.OTHER_CALL


def on_summary_done(state: RuntimeState, input: SummaryDone) -> Transition:
    """The summary is in: it is appended to the log and a new epoch of the view begins (the
    summary, the kept tail, then what comes next); nothing is removed from the log."""
    waiting = _awaited_summary(state, input.call_id)
    if isinstance(waiting, Ignored):
        return ignore(state, waiting)
    text = input.message.text.strip()
    if not text:
        failed = _replace(input.message, error_message="the summary call answered no text")
        return on_summary_failed(state, SummaryFailed(call_id=input.call_id, message=failed))
    c = state.committed
    context = context_of(c)
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
        meter_basis=None,  # it measured a request the compaction replaced
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
            t = call_llm(c2, compacted=True)
        case AfterSummary.END:
            t = ended_quietly(c2)
        case _:
            assert_never(waiting.then)
    return _replace(t, call_end=end, compacted=done)


def ended_quietly(c: ConversationState) -> Transition:
    c2 = commit(c, status=Status.FINAL, waiting=None, queued=(), queued_context=None)
    return settle(c2, (), Final(message=loop_answer("")))


def on_summary_failed(state: RuntimeState, input: SummaryFailed) -> Transition:
    """The summary call failed. Before a threshold compaction the turn goes on without one when
    the request fits the window (window.fits; that call then fails rather than compacts if the
    provider refuses it), else fails with the window error; an overflow or a /summarize fails
    the turn, saying why."""
    waiting = _awaited_summary(state, input.call_id)
    if isinstance(waiting, Ignored):
        return ignore(state, waiting)
    c = _replace(state.committed, waiting=None)
    why = input.message.error_message or "the summary call failed"
    end = CallEnd(waiting.call_id, CallOutcome.FAILED, why)
    match waiting.reason:
        case CompactionReason.THRESHOLD:
            t = call_llm(c, compacted=True)  # out when it fits the window, else refused
        case CompactionReason.OVERFLOW:
            t = fail(
                c,
                loop_failure(
                    "the conversation is over the model's context window and compacting it "
                    f"failed: {why}"
                ),
            )
        case CompactionReason.REQUESTED:
            t = fail(c, loop_failure(f"the conversation could not be summarized: {why}"))
        case _:
            assert_never(waiting.reason)
    return _replace(t, call_end=end)


def on_compact(state: RuntimeState) -> Transition:
    """/summarize: compact now, keeping the last user message and what follows it. A busy turn
    of a run that is gone is closed first, as for Start. With nothing to compact the run ends
    at once, and says so (`compacted` without a call)."""
    c = state.committed
    call_end: CallEnd | None = None
    if c.busy:
        c, _, call_end = close_turn(c, CALL_SUPERSEDED)
    cut = compaction.requested_cut(c.messages, first_summarizable(c))
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
            ended_quietly(_replace(c, waiting=None)),
            compacted=Compacted(reason=CompactionReason.REQUESTED),
        )
        return prepend((), t, call_end)
    context = context_of(c)
    fixed = compaction.fixed_tokens(render_prompt(context), render_tools(context))
    estimate = compaction.estimated_tokens(c.messages, c.fresh_from, fixed)
    bound = 0
    if context.window is not None:
        tail = compaction.tokens_of_chars(sum(compaction.chars_of(m) for m in c.messages[cut:]))
        bound = window_rule.summary_room(context.window, fixed, tail)
    t = summarize(
        _replace(c, waiting=None),
        cut,
        CompactionReason.REQUESTED,
        AfterSummary.END,
        estimate,
        bound,
    )
    return prepend((), t, call_end)
