"""The model calls a turn makes: the next call over the active history (or a compaction first,
when the request would pass the window's threshold), the same step on a fallback model, and a
compaction's summary call."""

from __future__ import annotations

import math

import msgspec

from cursor_byok.llm.canonical import messages_hash
from cursor_byok.llm.types import RequestMessages

from . import catalogue, compaction, derived, ids
from . import definitions as files
from . import window as window_rule
from .commands import CallLLM, FailureKind, ReadDefinitions, Summarize
from .context import ContextWindow, TurnContext
from .effort import call_effort
from .image_notes import sendable
from .meter import prompt_chars
from .prompt import render_prompt, render_tools
from .results import loop_failure
from .state import (
    AfterSummary,
    AwaitDefinitions,
    AwaitLLM,
    AwaitSummary,
    CompactionReason,
    ConversationState,
    Status,
)
from .step import CallEnd, Transition, commit, context_of, fail, settle

_replace = msgspec.structs.replace


def call_llm(c: ConversationState, *, compacted: bool = False, measure: bool = True) -> Transition:
    """Issue the next LLM call of the turn over the active history (or fail the turn when the
    per-turn call budget is spent). `c` carries the uncommitted changes of this transition.

    The window rule (window.py): when the request would pass the window's threshold, a
    compaction runs first (its summary call, then this call over the compacted view); a
    request that cannot be compacted goes out when it still fits the window with the least
    answer room, and fails the turn when it does not. `compacted`: one just ran for this call
    (never a second compaction in a row). `measure` False: go out whatever the estimate (a
    compaction that failed before the window was full).
    """
    context = context_of(c)
    if c.llm_calls >= context.max_llm_calls:
        return fail(
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
        if window_rule.over_threshold(window, estimate) and not compacted:
            return compact(
                c, CompactionReason.THRESHOLD, AfterSummary.CALL_LLM, window, fixed, estimate
            )
        if not window_rule.fits(window, estimate):
            refused = window_rule.refusal(window, fixed, estimate)
            return fail(c, loop_failure(refused.message()), kind=FailureKind.BAD_REQUEST)
    n = c.llm_calls + 1
    call = ids.call_id(c.turn_id, n)
    request = RequestMessages(
        system_prompt=system_prompt, messages=sendable(context.images, c.messages), tools=tools
    )
    digest = messages_hash(c.messages)
    chars = prompt_chars(request, context, summary_messages=first_summarizable(c))
    c2 = commit(
        c,
        llm_calls=n,
        status=Status.WAITING_LLM,
        waiting=AwaitLLM(call_id=call, messages_hash=digest, compacted=compacted, prompt=chars),
    )
    command = CallLLM(
        call_id=call,
        request=request,
        messages_hash=digest,
        catalogue_version=catalogue.CATALOGUE_VERSION,
        prompt=chars,
        effort=call_effort(context),
        window=window.size if window is not None else 0,
    )
    return settle(c2, (), command)


def first_call(c: ConversationState) -> Transition:
    """The first model call of a turn whose opening message is in `c`: now, or once the MCP
    definition files its tools need and the run has not read are read (definitions.py)."""
    paths = files.needed(context_of(c), c.definitions)
    if paths:
        c2 = commit(c, status=Status.READING, waiting=AwaitDefinitions(paths=paths))
        return settle(c2, (), ReadDefinitions(paths=paths))
    return call_llm(c)


def request_of(
    c: ConversationState, context: TurnContext, images: bool | None = None
) -> RequestMessages:
    """The request of the turn's next call over the active history; `images`: whether the
    model it goes to reads images (None: the run's model's, `context.images`)."""
    return RequestMessages(
        system_prompt=render_prompt(context),
        messages=sendable(context.images if images is None else images, c.messages),
        tools=render_tools(context),
    )


def fall_back(c: ConversationState, waiting: AwaitLLM, end: CallEnd) -> Transition | None:
    """The same step of the turn on the next of the context's fallback models, after call
    `waiting` failed before its first output; None when no fallback is left.

    The history has not moved since that call was made (steering waits in `queued`), so the
    request is the same messages, prompt and tools, sent as a new call to another model. Not
    counted in `max_llm_calls`: the turn is still at the same step. The turn's next call goes
    back to the run's own model."""
    context = context_of(c)
    k = waiting.fallback + 1
    if k > len(context.fallbacks):
        return None
    call = ids.fallback_call_id(ids.call_id(c.turn_id, c.llm_calls), k)
    seeing = context.fallback_images
    request = request_of(c, context, seeing[k - 1] if k <= len(seeing) else None)
    chars = prompt_chars(request, context, summary_messages=first_summarizable(c))
    c2 = commit(
        c,
        waiting=AwaitLLM(
            call_id=call,
            messages_hash=waiting.messages_hash,
            fallback=k,
            compacted=waiting.compacted,  # still no second compaction in a row
            prompt=chars,
        ),
    )
    command = CallLLM(
        call_id=call,
        request=request,
        messages_hash=waiting.messages_hash,
        catalogue_version=catalogue.CATALOGUE_VERSION,
        prompt=chars,
        model=context.fallbacks[k - 1],
        fallback_of=waiting.call_id,
    )
    return settle(c2, (), command, call_end=end)


def model_of(c: ConversationState, waiting: AwaitLLM) -> str:
    """The model call `waiting` went to: "" for the run's own, else its fallback's id (or
    the vision model describing pasted images)."""
    if waiting.describing is not None:
        return waiting.describing.model
    fallbacks = context_of(c).fallbacks
    return fallbacks[waiting.fallback - 1] if 0 < waiting.fallback <= len(fallbacks) else ""


def fallback_window() -> ContextWindow:
    """The budget of a run whose model gave none (a test's context): a common window."""
    return ContextWindow(tokens=128_000)


def first_summarizable(c: ConversationState) -> int:
    # A history that starts with an earlier summary: summarizing only that would shrink nothing.
    return 1 if derived.epoch_of(c, c.view) is not None else 0


def compact(
    c: ConversationState,
    reason: CompactionReason,
    then: AfterSummary,
    window: ContextWindow,
    fixed: int,
    estimate: int,
    scale: float = 1.0,
) -> Transition:
    """Start a compaction: plan the cut and make the summary call. When no cut fits, a request
    over the threshold that still fits the window goes out as it is (a threshold compaction);
    else the turn fails with what fills the window. `scale`: the provider's tokens per
    estimated token (an overflow whose refusal gave its count, window.scale)."""
    fixed = math.ceil(fixed * scale)
    estimate = max(estimate, math.ceil(estimate * scale))
    planned = compaction.plan_cut(
        c.messages, fixed=fixed, window=window, first=first_summarizable(c), scale=scale
    )
    if planned is None:
        if reason == CompactionReason.THRESHOLD and window_rule.fits(window, estimate):
            return call_llm(c, compacted=True, measure=False)
        refused = window_rule.refusal(window, fixed, estimate)
        return fail(c, loop_failure(refused.message()), kind=FailureKind.BAD_REQUEST)
    return summarize(c, planned.at, reason, then, estimate, planned.summary)


def summarize(
    c: ConversationState,
    cut: int,
    reason: CompactionReason,
    then: AfterSummary,
    estimate: int,
    summary_tokens: int = 0,
) -> Transition:
    n = c.llm_calls + 1
    waiting = AwaitSummary(
        call_id=ids.summary_call_id(c.turn_id, n),
        cut=cut,
        reason=reason,
        then=then,
        tokens_before=estimate,
        summary_tokens=summary_tokens,
    )
    c2 = commit(c, llm_calls=n, status=Status.SUMMARIZING, waiting=waiting)
    return settle(c2, (), summarize_command(c2, waiting))


def summarize_command(c: ConversationState, waiting: AwaitSummary) -> Summarize:
    window = context_of(c).window or fallback_window()
    bound = waiting.summary_tokens
    request = compaction.summary_request(c.messages[: waiting.cut], window, bound)
    return Summarize(
        call_id=waiting.call_id,
        request=request,
        messages_hash=messages_hash(request.messages),
        max_output_tokens=bound,
    )
