"""Compaction decided by the loop: the trigger, the cut, the summary call and its answer, the new
epoch of the view, the overflow path and /summarize. Whole states are asserted after each input."""

from __future__ import annotations

import re

from msgspec.structs import replace

from cursor_byok.llm import canonical
from cursor_byok.llm.events import ErrorEvent, ErrorKind
from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import AssistantMessage, TextContent, ToolResultMessage, Usage
from cursor_byok.loop import (
    AfterSummary,
    AwaitLLM,
    AwaitSummary,
    CallLLM,
    Cancel,
    Canceled,
    Compact,
    Compacted,
    CompactionMark,
    CompactionReason,
    ContextWindow,
    Failed,
    FailureKind,
    Final,
    Ignored,
    LLMEvent,
    Resume,
    Rewind,
    RuntimeState,
    Span,
    Status,
    Summarize,
    SummaryDone,
    SummaryFailed,
    ToolResult,
    Transition,
    TurnContext,
    TurnStart,
    WaitInput,
    compaction,
    render_prompt,
    render_tools,
    transition,
)
from cursor_byok.loop import view as views

from .loop_helpers import result, start, stream, tool_call, user

CID = "c"


def encode_messages(messages: tuple[object, ...]) -> bytes:
    """The history as the stream of canonical message bytes (what the adapters extend)."""
    return b"".join(canonical.encode_message(m) for m in messages)  # type: ignore[arg-type]


BASE = TurnContext()
FIXED = compaction.fixed_tokens(render_prompt(BASE), render_tools(BASE))
# A window that holds the fixed part, the summary allowance and about 2,000 tokens of history.
WINDOW = ContextWindow(
    tokens=int((FIXED + 200 + compaction.SUMMARY_OVERHEAD_TOKENS + 2000) / 0.9),
    summary_output=200,
)
CTX = replace(BASE, window=WINDOW)


def words(n: int, tag: str = "w") -> str:
    """About n tokens of text by the character estimate."""
    return (tag + "xyz ") * n


def answer(state: RuntimeState, text: str, usage: Usage | None = None) -> RuntimeState:
    ts, _ = stream(state, FauxResponse.text(text, usage=usage))
    return ts[-1].state


def summary_answer(text: str) -> AssistantMessage:
    return AssistantMessage(
        content=(TextContent(text=text),),
        api="faux",
        provider="faux",
        model="faux-model",
        usage=Usage(input=300, output=40),
    )


def three_turns() -> RuntimeState:
    """Three turns of about 600 tokens each: the fourth's request passes the threshold."""
    s = RuntimeState.new(CID)
    for i in range(3):
        t = transition(s, start(words(300, f"q{i}"), CTX))
        assert isinstance(t.command, CallLLM)
        s = answer(t.state, words(300, f"a{i}"))
    return s


def test_below_the_threshold_no_compaction() -> None:
    s = RuntimeState.new(CID)
    t = transition(s, start("hello", CTX))
    assert isinstance(t.command, CallLLM)


def test_a_request_over_the_threshold_is_summarized_first_then_called_over_the_new_epoch() -> None:
    s = three_turns()
    before = s.committed
    t = transition(s, start(words(100, "q3"), CTX))
    c = t.state.committed
    estimate = compaction.estimated_tokens(c.messages, 0, FIXED)
    assert estimate > WINDOW.budget
    # The cut keeps the last user message (position 6) and what follows it (nothing yet).
    waiting = AwaitSummary(
        call_id="c:4:summary1",
        cut=6,
        reason=CompactionReason.THRESHOLD,
        then=AfterSummary.CALL_LLM,
        tokens_before=estimate,
        summary_tokens=WINDOW.summary_output,  # the room allows the model's whole bound
    )
    assert c == replace(
        before,
        turn=4,
        turn_id="c:4",
        log=(*before.log, user(words(100, "q3"))),
        messages=(*before.log, user(words(100, "q3"))),
        status=Status.SUMMARIZING,
        waiting=waiting,
        llm_calls=1,
        commit=before.commit + 1,
        last_commit_id=f"c@{before.commit + 1}",
        context=CTX,
        # the fourth turn began from the three before it
        turn_starts=(*before.turn_starts, TurnStart(view=(Span(0, len(before.log)),))),
    )
    assert len(c.turn_starts) == 4
    request = compaction.summary_request(before.log, WINDOW)
    assert t.command == Summarize(
        call_id="c:4:summary1",
        request=request,
        messages_hash=canonical.messages_hash(request.messages),
        max_output_tokens=WINDOW.summary_output,
    )
    assert request.system_prompt == compaction.SUMMARY_PROMPT
    assert "q0xyz" in request.messages[0].content[0].text  # type: ignore[union-attr]
    # Everything else is ignored while the summary is written.
    assert transition(
        t.state, SummaryDone(call_id="other", message=summary_answer("x"))
    ) == Transition(t.state, (), WaitInput(), ignored=Ignored.OTHER_CALL)

    done = transition(t.state, SummaryDone(call_id="c:4:summary1", message=summary_answer("S")))
    c2 = done.state.committed
    summary = compaction.summary_message("S")
    at = len(c.log)
    messages = (summary, user(words(100, "q3")))
    after = compaction.estimated_tokens(messages, 2, FIXED)
    mark = CompactionMark(
        at=at,
        kept=1,
        reason=CompactionReason.THRESHOLD,
        tokens_before=estimate,
        tokens_after=after,
        call_id="c:4:summary1",
    )
    digest = canonical.messages_hash(messages)
    assert c2 == replace(
        c,
        log=(*c.log, summary),
        messages=messages,
        view=(Span(at, at + 1), Span(6, 7), Span(at + 1)),
        compactions=(mark,),
        fresh_from=2,
        status=Status.WAITING_LLM,
        waiting=AwaitLLM(
            call_id="c:4:llm2",
            messages_hash=digest,
            compacted=True,
            prompt=done.command.prompt,  # type: ignore[union-attr]
        ),
        llm_calls=2,
        commit=c.commit + 1,
        last_commit_id=f"c@{c.commit + 1}",
        meter_basis=None,  # the last meter measured a request the compaction replaced
    )
    assert isinstance(done.command, CallLLM)
    # The call's meter counts the summary as the summarized conversation.
    assert done.command.prompt.summarized_conversation == len(summary.text)
    assert done.appended == (summary,)
    assert views.materialize(c2.view, c2.log) == messages
    assert isinstance(done.command, CallLLM) and done.command.call_id == "c:4:llm2"
    assert done.command.request.messages == messages
    assert (
        done.command.request.messages[0]
        .content[0]
        .text.startswith(  # type: ignore[union-attr]
            compaction.SUMMARY_HEADER
        )
    )
    assert done.compacted == Compacted(
        reason=CompactionReason.THRESHOLD,
        summary="S",
        call_id="c:4:summary1",
        tokens_before=estimate,
        tokens_after=after,
        summarized=6,
        kept=1,
    )
    assert done.call_end is not None and done.call_end.call_id == "c:4:summary1"
    # The log lost nothing.
    assert c2.log[: len(before.log)] == before.log

    # From now on consecutive requests extend each other: the next call's messages (and their
    # canonical bytes) start with the previous call's.
    s3 = answer(done.state, "fine")
    nxt = transition(s3, start("next", CTX))
    assert isinstance(nxt.command, CallLLM)
    assert nxt.command.request.messages[:2] == messages
    first = encode_messages(done.command.request.messages)
    second = encode_messages(nxt.command.request.messages)
    assert second.startswith(first) and len(second) > len(first)
    assert nxt.command.request.system_prompt == done.command.request.system_prompt
    assert nxt.command.request.tools == done.command.request.tools


def test_the_measured_usage_drives_the_trigger_and_is_ignored_across_a_compaction() -> None:
    s = RuntimeState.new(CID)
    s = answer(transition(s, start("short", CTX)).state, "ok", usage=Usage(input=WINDOW.budget))
    again = user("again")
    t = transition(s, start("again", CTX))
    assert isinstance(t.command, Summarize)  # the provider's count passed the threshold
    assert t.state.committed.waiting == AwaitSummary(
        call_id="c:2:summary1",
        cut=2,
        reason=CompactionReason.THRESHOLD,
        then=AfterSummary.CALL_LLM,
        tokens_before=WINDOW.budget + compaction.tokens_of_chars(compaction.chars_of(again)),
        summary_tokens=WINDOW.summary_output,
    )
    done = transition(t.state, SummaryDone(call_id="c:2:summary1", message=summary_answer("S")))
    # The kept tail has no answer of this epoch: the estimate is by characters, below it.
    assert isinstance(done.command, CallLLM)
    assert done.state.committed.fresh_from == 2


def test_one_long_turn_is_cut_inside_at_a_tool_result_boundary() -> None:
    s = RuntimeState.new(CID)
    t = transition(s, start("do the work", CTX))
    s = t.state
    for i in range(6):
        call = tool_call(f"t{i}")
        ts, _ = stream(s, FauxResponse.tool_calls([call], thinking=f"think {i}"))
        s = ts[-1].state
        t = transition(s, ToolResult(message=result(f"t{i}", words(450, f"r{i}"))))
        s = t.state
        if isinstance(t.command, Summarize):
            break
    assert isinstance(t.command, Summarize)
    c = s.committed
    waiting = c.waiting
    assert isinstance(waiting, AwaitSummary)
    cut = waiting.cut
    # Inside the turn: after a tool result, at an assistant message.
    assert cut > 1
    assert isinstance(c.messages[cut - 1], ToolResultMessage)
    assert isinstance(c.messages[cut], AssistantMessage)
    tail = c.messages[cut:]
    calls = {b.id for m in tail if isinstance(m, AssistantMessage) for b in m.tool_calls}
    results = {m.tool_call_id for m in tail if isinstance(m, ToolResultMessage)}
    assert results == calls  # no broken pair
    done = transition(s, SummaryDone(call_id=waiting.call_id, message=summary_answer("S")))
    assert isinstance(done.command, CallLLM)
    assert done.command.request.messages == (compaction.summary_message("S"), *tail)


def test_a_tail_that_cannot_fit_fails_with_what_fills_the_window_and_never_loops() -> None:
    s = RuntimeState.new(CID)
    s = answer(transition(s, start("one", CTX)).state, "ok")
    t = transition(s, start(words(WINDOW.tokens, "huge"), CTX))
    assert isinstance(t.command, Failed)
    assert t.command.kind == FailureKind.BAD_REQUEST
    text = t.command.message.error_message or ""
    assert f"{WINDOW.tokens:,} tokens" in text and "system prompt, rules and tools" in text
    assert t.state.committed.status == Status.FAILED
    # The parts it names add up to its total, and that total is over the window it names.
    window, fixed, rest, room, total = (
        int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", text)[:5]
    )
    assert (window, fixed) == (WINDOW.tokens, FIXED)
    assert fixed + rest + room == total > window


def test_a_request_refused_names_parts_that_sum_past_the_window() -> None:
    """The window rule's refusal: P + M > W, with P + M given as its parts (a 1,000-token
    answer reserve, so the least answer room M is 1,000)."""
    ctx = replace(BASE, window=replace(WINDOW, output_reserve=1000))
    s = RuntimeState.new(CID)

    def tokens(n: int) -> str:  # a message of n tokens by the estimate, with its framing
        return "a" * ((n - 4) * compaction.CHARS_PER_TOKEN)

    t = transition(s, start(tokens(WINDOW.tokens - FIXED - 900), ctx))
    assert isinstance(t.command, Failed) and t.command.kind == FailureKind.BAD_REQUEST
    text = t.command.message.error_message or ""
    window, fixed, rest, room, total = (
        int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", text)[:5]
    )
    assert (window, fixed, rest, room) == (WINDOW.tokens, FIXED, WINDOW.tokens - FIXED - 900, 1000)
    assert fixed + rest + room == total == window + 100
    # 100 tokens fewer and the same request goes out: its answer has exactly M.
    fits = transition(s, start(tokens(WINDOW.tokens - FIXED - 1000), ctx))
    assert isinstance(fits.command, CallLLM)


def overflow(call_id: str) -> LLMEvent:
    message = AssistantMessage(
        content=(),
        api="faux",
        provider="faux",
        model="m",
        stop_reason="error",
        error_message="prompt is too long",
    )
    return LLMEvent(
        call_id=call_id,
        event=ErrorEvent(
            reason="error", message=message, http_status=400, kind=ErrorKind.CONTEXT_LENGTH
        ),
    )


def test_context_length_exceeded_compacts_once_then_a_new_call_and_never_a_loop() -> None:
    s = RuntimeState.new(CID)
    s = answer(transition(s, start("one", CTX)).state, "first answer")
    t = transition(s, start("two", CTX))
    assert isinstance(t.command, CallLLM) and t.command.call_id == "c:2:llm1"
    over = transition(t.state, overflow("c:2:llm1"))
    assert isinstance(over.command, Summarize) and over.command.call_id == "c:2:summary2"
    assert over.call_end is not None and over.call_end.call_id == "c:2:llm1"
    waiting = over.state.committed.waiting
    assert isinstance(waiting, AwaitSummary) and waiting.reason == CompactionReason.OVERFLOW
    assert waiting.cut == 2
    done = transition(over.state, SummaryDone(call_id="c:2:summary2", message=summary_answer("S")))
    # A new call (new id) with the compacted request, not a resend of the refused one.
    assert isinstance(done.command, CallLLM) and done.command.call_id == "c:2:llm3"
    assert done.command.request.messages == (compaction.summary_message("S"), user("two"))
    again = transition(done.state, overflow("c:2:llm3"))
    assert isinstance(again.command, Failed)
    assert again.state.committed.status == Status.FAILED


def test_a_crash_during_the_summary_call_resumes_the_same_call() -> None:
    s = three_turns()
    t = transition(s, start(words(100, "q3"), CTX))
    assert isinstance(t.command, Summarize)
    resumed = transition(RuntimeState.of(t.state.committed), Resume())
    assert resumed.state.committed is t.state.committed
    assert resumed.command == t.command


def test_a_failed_summary_before_a_threshold_compaction_goes_on_without_one() -> None:
    s = three_turns()
    t = transition(s, start(words(100, "q3"), CTX))
    failed = replace(summary_answer(""), stop_reason="error", error_message="boom")
    f = transition(t.state, SummaryFailed(call_id="c:4:summary1", message=failed))
    assert isinstance(f.command, CallLLM) and f.command.call_id == "c:4:llm2"
    assert f.command.request.messages == t.state.committed.messages
    assert f.state.committed.compactions == ()
    assert f.call_end is not None and f.call_end.error == "boom"


def test_summarize_on_an_empty_conversation_ends_at_once_saying_nothing_was_compacted() -> None:
    s = RuntimeState.new(CID)
    t = transition(s, Compact())
    assert isinstance(t.command, Final) and t.command.message.text == ""
    assert t.compacted == Compacted(reason=CompactionReason.REQUESTED)
    # Nothing committed: the first turn still takes the history the client holds.
    assert t.state is s


def test_summarize_below_the_threshold_compacts_on_demand() -> None:
    s = RuntimeState.new(CID)
    s = answer(transition(s, start("one", CTX)).state, "first")
    s = answer(transition(s, start("two", CTX)).state, "second")
    t = transition(s, Compact())
    assert isinstance(t.command, Summarize) and t.command.call_id == "c:2:summary2"
    waiting = t.state.committed.waiting
    assert isinstance(waiting, AwaitSummary)
    assert (waiting.cut, waiting.reason, waiting.then) == (
        2,
        CompactionReason.REQUESTED,
        AfterSummary.END,
    )
    done = transition(t.state, SummaryDone(call_id="c:2:summary2", message=summary_answer("S")))
    assert isinstance(done.command, Final) and done.command.message.text == ""
    c = done.state.committed
    assert c.status == Status.FINAL
    assert c.messages == (
        compaction.summary_message("S"),
        user("two"),
        s.committed.messages[-1],
    )
    assert done.compacted is not None and done.compacted.summarized == 2
    # A second /summarize right away: only the summary precedes the last user message.
    again = transition(done.state, Compact())
    assert isinstance(again.command, Final)
    assert again.compacted == Compacted(reason=CompactionReason.REQUESTED)


def test_a_rewind_to_a_turn_before_the_compaction_restores_the_unsummarized_view() -> None:
    s = three_turns()
    first_turn = views.closed(s.committed.view, 2)
    t = transition(s, start(words(100, "q3"), CTX))
    done = transition(t.state, SummaryDone(call_id="c:4:summary1", message=summary_answer("S")))
    s2 = answer(done.state, "after")
    epoch_view = views.closed(s2.committed.view, len(s2.committed.log))
    back = transition(s2, Rewind(view=first_turn))
    c = back.state.committed
    assert c.messages == s.committed.log[:2]
    assert c.fresh_from == 0
    forth = transition(back.state, Rewind(view=epoch_view))
    c2 = forth.state.committed
    assert c2.messages == s2.committed.messages
    assert c2.fresh_from == 2


def test_the_summary_request_is_trimmed_from_the_oldest_side_to_fit_its_model() -> None:
    small = replace(WINDOW, summary_window=1500, summary_output=200)
    head = tuple(user(words(200, f"m{i}")) for i in range(10))
    request = compaction.summary_request(head, small)
    text = request.messages[0].content[0].text  # type: ignore[union-attr]
    limit = (1500 - 200 - compaction.SUMMARY_OVERHEAD_TOKENS) * compaction.CHARS_PER_TOKEN
    assert len(text) <= limit + 200
    assert compaction.TRIMMED_NOTE in text
    assert "m9xyz" in text and "m0xyz" not in text  # the newest kept, the oldest dropped


def test_a_cancel_while_summarizing_drops_the_summary_and_keeps_the_history() -> None:
    s = three_turns()
    t = transition(s, start(words(100, "q3"), CTX))
    c = t.state.committed
    canceled = transition(t.state, Cancel())
    assert canceled.command == Canceled(reason="canceled by the user")
    assert canceled.state.committed == replace(
        c,
        status=Status.CANCELED,
        waiting=None,
        commit=c.commit + 1,
        last_commit_id=f"c@{c.commit + 1}",
    )
    assert canceled.appended == ()
    assert canceled.call_end is not None and canceled.call_end.call_id == "c:4:summary1"
    # Its answer, arriving late, is ignored.
    late = transition(
        canceled.state, SummaryDone(call_id="c:4:summary1", message=summary_answer("S"))
    )
    assert late == Transition(canceled.state, (), WaitInput(), ignored=Ignored.NOT_AWAITED)


def test_a_compacted_request_still_over_the_threshold_goes_out_without_a_second_one() -> None:
    """Right after a compaction the call goes out even when the compacted request is still
    past the threshold (a summary longer than planned) and its kept tail could be cut again:
    never a second compaction in a row."""
    from cursor_byok.loop import window as window_rule

    s = transition(RuntimeState.new(CID), start("do the work", CTX)).state
    for i in range(60):  # small results: the kept tail holds several of them
        ts, _ = stream(s, FauxResponse.tool_calls([tool_call(f"t{i}")], thinking=f"think {i}"))
        t = transition(ts[-1].state, ToolResult(message=result(f"t{i}", words(60, f"r{i}"))))
        s = t.state
        if isinstance(t.command, Summarize):
            break
    waiting = s.committed.waiting
    assert isinstance(waiting, AwaitSummary)
    tail = s.committed.messages[waiting.cut :]
    assert sum(isinstance(m, ToolResultMessage) for m in tail) > 2  # it could be cut again

    def compacted_estimate(n: int) -> int:
        messages = (compaction.summary_message(words(n, "s")), *tail)
        return compaction.estimated_tokens(messages, len(messages), FIXED)

    n = next(
        n
        for n in range(10, 5000, 10)
        if window_rule.over_threshold(WINDOW, compacted_estimate(n))
        and window_rule.fits(WINDOW, compacted_estimate(n))
    )
    long_summary = summary_answer(words(n, "s"))
    done = transition(s, SummaryDone(call_id=waiting.call_id, message=long_summary))
    assert isinstance(done.command, CallLLM)
    assert done.command.request.messages == (compaction.summary_message(words(n, "s")), *tail)
    after = done.state.committed.waiting
    assert isinstance(after, AwaitLLM) and after.compacted
