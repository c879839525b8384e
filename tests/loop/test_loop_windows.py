"""The window rule fed by the provider (loop/window.py): a refusal that gives the provider's
window makes the loop compact to fit that window, keep it for the turn and report it; a success
whose usage is over the window (a silent overflow) is reported and the next call compacts."""

from __future__ import annotations

from msgspec.structs import replace

from cursor_byok.llm.events import ContextLimit, ErrorEvent, ErrorKind
from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import AssistantMessage, Usage
from cursor_byok.loop import (
    AwaitSummary,
    CallLLM,
    CompactionReason,
    ContextWindow,
    Failed,
    LLMEvent,
    RuntimeState,
    Summarize,
    SummaryDone,
    SummaryFailed,
    WindowReport,
    compaction,
    transition,
)
from cursor_byok.loop import window as window_rule

from .loop_helpers import start, stream, user
from .test_loop_compaction import BASE, CID, FIXED, answer, summary_answer, words

# A window the configuration judged large; the provider serves FIXED + 2,500.
WINDOW = ContextWindow(tokens=128_000, output_reserve=200, summary_output=4096)
CTX = replace(BASE, window=WINDOW)
SERVED = FIXED + 2500
SAID = (
    "llama HTTP 400: request (9412 tokens) exceeds the available context size "
    f"({SERVED} tokens), try increasing it"
)


def refused(call_id: str, limit: ContextLimit | None) -> LLMEvent:
    message = AssistantMessage(
        content=(),
        api="faux",
        provider="faux",
        model="m",
        stop_reason="error",
        error_message=SAID,
    )
    event = ErrorEvent(
        reason="error",
        message=message,
        http_status=400,
        kind=ErrorKind.CONTEXT_LENGTH,
        context_limit=limit,
    )
    return LLMEvent(call_id=call_id, event=event)


def two_turns() -> RuntimeState:
    s = RuntimeState.new(CID)
    s = answer(transition(s, start(words(400, "q0"), CTX)).state, words(400, "a0"))
    return s


def test_a_refusal_with_the_providers_window_compacts_to_fit_it_and_reports_it() -> None:
    s = two_turns()
    t = transition(s, start(words(200, "q1"), CTX))
    assert isinstance(t.command, CallLLM)  # 128,000 configured: no compaction before it
    estimate = compaction.estimated_tokens(t.state.committed.messages, 0, FIXED)  # the loop's
    prompt = int(estimate * 1.2)  # the provider counts a fifth more
    over = transition(t.state, refused("c:2:llm1", ContextLimit(window=SERVED, prompt=prompt)))
    assert isinstance(over.command, Summarize)
    c = over.state.committed
    assert c.context is not None and c.context.window is not None
    assert c.context.window == replace(WINDOW, provider_tokens=SERVED)
    assert c.context.window.size == SERVED
    assert over.window_report == WindowReport(said=SAID, tokens=SERVED, window=128_000)
    waiting = c.waiting
    assert isinstance(waiting, AwaitSummary) and waiting.reason == CompactionReason.OVERFLOW
    assert waiting.tokens_before == prompt  # counted as the provider counted it
    # The summary and the kept tail fit the provider's window by its count (x 1.2).
    done = transition(over.state, SummaryDone(call_id=waiting.call_id, message=summary_answer("S")))
    assert isinstance(done.command, CallLLM)
    after = compaction.estimated_tokens(done.command.request.messages, 2, FIXED)
    summary_bound = waiting.summary_tokens
    assert summary_bound > 0
    tail = after - FIXED
    assert (FIXED + tail) * 1.2 + summary_bound + window_rule.SUMMARY_FRAMING_TOKENS <= SERVED


def test_without_a_window_in_the_refusal_the_configured_one_stays() -> None:
    s = two_turns()
    t = transition(s, start(words(200, "q1"), CTX))
    over = transition(t.state, refused("c:2:llm1", None))
    assert isinstance(over.command, Summarize)
    c = over.state.committed
    assert c.context is not None and c.context.window == WINDOW
    assert over.window_report is None


def test_a_success_over_the_window_is_reported_and_the_next_call_compacts_first() -> None:
    small = replace(WINDOW, tokens=FIXED + 1500)
    ctx = replace(BASE, window=small)
    s = RuntimeState.new(CID)
    s = answer(transition(s, start("one", ctx)).state, "ok")
    t = transition(s, start("two", ctx))
    assert isinstance(t.command, CallLLM)
    used = small.tokens + 700
    ts, _ = stream(t.state, FauxResponse.text("fine", usage=Usage(input=used - 5, output=5)))
    last = ts[-1]
    assert last.window_report == WindowReport(
        said=f"the provider answered a request whose usage is {used:,} tokens, more than the "
        f"window of {small.tokens:,}",
        used=used,
        window=small.tokens,
    )
    # Its usage is the next estimate: the next turn compacts before it calls.
    nxt = transition(last.state, start("three", ctx))
    assert isinstance(nxt.command, Summarize)
    # Within the window, nothing is reported.
    ts2, _ = stream(t.state, FauxResponse.text("fine", usage=Usage(input=100, output=5)))
    assert ts2[-1].window_report is None


def test_a_failed_summary_sends_the_request_only_when_it_fits_the_window() -> None:
    """A threshold compaction whose summary fails: the request goes out as it is while P + M
    fits the window, and is refused with the window error (its parts) when it does not."""
    s = RuntimeState.new(CID)
    s = answer(transition(s, start(words(400, "q0"), CTX)).state, words(400, "a0"))
    q1 = user(words(40, "q1"))
    prompt = compaction.estimated_tokens((*s.committed.messages, q1), 0, FIXED)
    fits = replace(WINDOW, tokens=prompt + 200)  # over T, and P + M == W (M is R, 200)
    too_small = replace(WINDOW, tokens=prompt + 199)  # over T, and P + M > W
    failed = replace(summary_answer(""), stop_reason="error", error_message="boom")
    for window, expect in ((fits, CallLLM), (too_small, Failed)):
        t = transition(s, start(words(40, "q1"), replace(BASE, window=window)))
        assert isinstance(t.command, Summarize), window
        f = transition(t.state, SummaryFailed(call_id=t.command.call_id, message=failed))
        assert isinstance(f.command, expect), (window, f.command)
    assert isinstance(f.command, Failed)
    assert "cannot be compacted" in (f.command.message.error_message or "")
