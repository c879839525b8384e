"""The decisions the runtime used to make, now inputs of `transition`: Resume, ToolLost,
Rewind, Supersede and a newer run's Start, follow-up context and mode, and what a transition
reports besides its state (appended messages, local results, how a model call ended).

Each test asserts the whole committed state after the input, the way h11's tests do."""

from __future__ import annotations

import msgspec
import pytest

from cursor_byok.llm.canonical import messages_hash
from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import AssistantMessage, TextContent, ToolCall, ToolResultMessage
from cursor_byok.loop import (
    AwaitClient,
    AwaitLLM,
    CallClient,
    CallEnd,
    CallLLM,
    CallOutcome,
    Canceled,
    ConversationState,
    Failed,
    FailureKind,
    Final,
    Ignored,
    LocalResult,
    LoopError,
    LostCause,
    ResendLLM,
    Resume,
    Rewind,
    RuntimeState,
    Span,
    Start,
    Status,
    Supersede,
    ToolLost,
    ToolOperation,
    ToolResult,
    Transition,
    TurnContext,
    UserMessage,
    WaitInput,
    transition,
)
from cursor_byok.loop import view as views
from cursor_byok.loop.results import CALL_SUPERSEDED, CANCELED_RESULT_TEXT
from cursor_byok.loop.transition import CONTINUED_ELSEWHERE
from tests.loop.loop_helpers import result, start, stream, tool_call, user

CID = "conv"
replace = msgspec.structs.replace


def started(text: str = "hello", context: TurnContext | None = None) -> RuntimeState:
    return transition(RuntimeState.new(CID), start(text, context)).state


def answered(text: str = "hello", answer: str = "hi") -> RuntimeState:
    ts, _ = stream(started(text), FauxResponse.text(answer))
    return ts[-1].state


def at_tools(calls: list[ToolCall]) -> RuntimeState:
    ts, _ = stream(started(), FauxResponse.tool_calls(calls))
    return ts[-1].state


# -- what a transition reports ---------------------------------------------------------------


def test_appended_is_exactly_what_the_log_gained() -> None:
    s0 = RuntimeState.new(CID)
    t = transition(s0, start("hello"))
    assert t.appended == (user("hello"),) == t.state.committed.log
    ts, _ = stream(t.state, FauxResponse.tool_calls([tool_call("a")]))
    done = ts[-1]
    assert len(done.appended) == 1 and isinstance(done.appended[0], AssistantMessage)
    assert all(x.appended == () for x in ts[:-1])  # streaming appends nothing
    r = transition(done.state, ToolResult(message=result("a")))
    assert r.appended == (result("a"),)
    assert r.state.committed.log == (*done.state.committed.log, result("a"))


def test_local_results_name_the_calls_the_loop_answered_itself() -> None:
    calls = [
        tool_call("a", "Nope"),
        ToolCall(id="b", name="Read", raw_arguments='{"path":'),
        tool_call("c"),
    ]
    ts, _ = stream(started(), FauxResponse.tool_calls(calls))
    done = ts[-1]
    assert isinstance(done.command, CallClient) and done.command.tool_call.id == "c"
    assert [(r.call.id, r.llm_call_id, r.content_index) for r in done.local_results] == [
        ("a", "conv:1:llm1", 0),
        ("b", "conv:1:llm1", 1),
    ]
    assert [r.result for r in done.local_results] == list(done.appended[1:3])
    assert all(r.result.is_error for r in done.local_results)


def test_call_end_reports_how_each_model_call_ended() -> None:
    ts, _ = stream(started(), FauxResponse.text("hi"))
    assert ts[-1].call_end == CallEnd("conv:1:llm1", CallOutcome.COMMITTED)
    assert all(t.call_end is None for t in ts[:-1])
    ts, _ = stream(started(), FauxResponse.error("quota", reason="error"))
    assert ts[-1].call_end == CallEnd("conv:1:llm1", CallOutcome.FAILED, "quota")
    ts, _ = stream(started(), FauxResponse.error("stopped", reason="aborted"))
    assert ts[-1].call_end == CallEnd("conv:1:llm1", CallOutcome.CANCELED, "stopped")
    bad = AssistantMessage(
        content=(ToolCall(id="x", name="Read"), ToolCall(id="x", name="LS")),
        api="faux",
        provider="faux",
        model="m",
        stop_reason="toolUse",
    )
    ts, _ = stream(started(), FauxResponse.message(bad))
    end = ts[-1].call_end
    assert end is not None and end.outcome == CallOutcome.FAILED
    assert end.error == "invalid response from the model: tool call id x is used twice"
    t = transition(started(), Supersede())
    assert t.call_end == CallEnd("conv:1:llm1", CallOutcome.CANCELED, CALL_SUPERSEDED)


# -- a newer run: Supersede and Start while busy ------------------------------------------


def test_supersede_ends_the_busy_turn_canceled_with_its_cards() -> None:
    s = at_tools([tool_call("a"), tool_call("b", "LS", path=".")])
    t = transition(s, Supersede())
    c = t.state.committed
    closing = (
        replace(result("a", CANCELED_RESULT_TEXT), is_error=True),
        replace(result("b", CANCELED_RESULT_TEXT, name="LS"), is_error=True),
    )
    assert c == replace(
        s.committed,
        log=(*s.committed.log, *closing),
        messages=(*s.committed.messages, *closing),
        status=Status.CANCELED,
        waiting=None,
        commit=s.committed.commit + 1,
        last_commit_id=f"{CID}@{s.committed.commit + 1}",
    )
    assert t.command == Canceled(reason="a newer request for this conversation arrived")
    assert [(r.call.id, r.content_index) for r in t.local_results] == [("a", 0), ("b", 1)]


def test_supersede_when_idle_ends_the_run_and_changes_nothing_more() -> None:
    s = answered()
    t = transition(s, Supersede())
    assert t.command == Canceled(reason="a newer request for this conversation arrived")
    assert t.state.committed.status == Status.CANCELED and t.appended == ()
    again = transition(t.state, Supersede())
    assert again.state is t.state and isinstance(again.command, Canceled)


# -- Resume ----------------------------------------------------------------------------------


def test_resume_while_waiting_on_the_model_resends_the_stored_call() -> None:
    s = started()
    t = transition(s, Resume())
    assert t.state is s
    waiting = s.committed.waiting
    assert isinstance(waiting, AwaitLLM)
    assert t.command == ResendLLM(call_id="conv:1:llm1", messages_hash=waiting.messages_hash)
    assert waiting.messages_hash == messages_hash(s.committed.messages)


def test_resume_of_another_turn_ends_canceled_without_touching_the_state() -> None:
    s = started()
    t = transition(s, Resume(turn_id="conv:0"))
    assert t.state is s and t.command == Canceled(reason=CONTINUED_ELSEWHERE)
    same = transition(s, Resume(turn_id="conv:1"))
    assert isinstance(same.command, ResendLLM)


def test_resume_after_the_turn_ended_replays_or_reports_it() -> None:
    s = answered(answer="the answer")
    t = transition(s, Resume())
    assert t.state is s
    assert t.command == Final(message=s.committed.messages[-1], replay=True)  # type: ignore[arg-type]
    ts, _ = stream(started(), FauxResponse.error("boom"))
    failed = transition(ts[-1].state, Resume())
    assert isinstance(failed.command, Failed) and failed.command.kind == FailureKind.PROVIDER
    assert failed.command.message.error_message == "the previous attempt of this turn failed"
    canceled = transition(transition(started(), Supersede()).state, Resume())
    assert canceled.command == Canceled(reason="the turn was canceled")
    nothing = transition(RuntimeState.new(CID), Resume())
    assert isinstance(nothing.command, Failed)
    assert nothing.command.kind == FailureKind.BAD_REQUEST
    assert nothing.command.message.error_message == "there is nothing to resume"


def test_resume_of_a_tool_never_sent_sends_it() -> None:
    s = at_tools([tool_call("a")])
    t = transition(s, Resume())
    assert t.state is s
    assert t.command == CallClient(
        operation_id="conv:1:llm1:a", tool_call=tool_call("a"), llm_call_id="conv:1:llm1"
    )
    other = transition(s, Resume(operation=ToolOperation(operation_id="other", sent=True)))
    assert other.command == t.command


def test_resume_of_a_tool_answered_before_the_crash_applies_the_recorded_answer() -> None:
    s = at_tools([tool_call("a")])
    op = ToolOperation(operation_id="conv:1:llm1:a", sent=True, result=result("a", "kept"))
    t = transition(s, Resume(operation=op))
    assert isinstance(t.command, CallLLM)
    assert t.appended == (result("a", "kept"),)
    assert t.local_results == ()  # the client's own answer: its card was already sent


@pytest.mark.parametrize(
    ("name", "resent"), [("Read", True), ("LS", True), ("Shell", False), ("some_mcp_tool", False)]
)
def test_resume_of_a_tool_sent_but_unanswered(name: str, resent: bool) -> None:
    """A call without side effects is sent again; one that may have changed something gets an
    error result saying its outcome is unknown, and is never run twice."""
    call = tool_call("a", name)
    ts, _ = stream(
        started(context=TurnContext(mcp_tools=mcp_definitions(name))),
        FauxResponse.tool_calls([call]),
    )
    s = ts[-1].state
    op = ToolOperation(operation_id="conv:1:llm1:a", sent=True)
    t = transition(s, Resume(operation=op))
    if resent:
        assert t.state is s and isinstance(t.command, CallClient)
        return
    assert isinstance(t.command, CallLLM)
    (lost,) = t.appended
    assert isinstance(lost, ToolResultMessage) and lost.is_error
    assert lost.text.startswith(f"Error: this {name} call was sent to the client, but its answer")
    assert t.local_results == (LocalResult(call, "conv:1:llm1", 0, lost),)


def mcp_definitions(name: str) -> tuple[object, ...]:
    from cursor_byok.llm.types import ToolDefinition

    if name in ("Read", "LS", "Shell"):
        return ()
    return (ToolDefinition(name=name, description="", parameters={"type": "object"}),)


# -- ToolLost ----------------------------------------------------------------------------------


def test_a_timed_out_tool_gets_an_error_result_and_the_turn_goes_on() -> None:
    s = at_tools([tool_call("a"), tool_call("b")])
    t = transition(
        s, ToolLost(operation_id="conv:1:llm1:a", cause=LostCause.TIMED_OUT, waited_ms=600_000)
    )
    (lost,) = t.appended
    assert isinstance(lost, ToolResultMessage) and lost.is_error
    assert lost.text == (
        "Error: the client did not answer the Read call within 600 s; it was aborted. "
        "Its effects, if any, are unknown."
    )
    assert t.command == WaitInput()  # b went to the client with a, and is still there
    c = t.state.committed
    assert isinstance(c.waiting, AwaitClient) and c.waiting.next == 1
    assert c.waiting.outstanding == ("conv:1:llm1:b",)
    assert c.status == Status.WAITING_CLIENT
    assert [r.call.id for r in t.local_results] == ["a"]


def test_tool_lost_for_another_operation_is_ignored() -> None:
    s = at_tools([tool_call("a")])
    for op in ("conv:1:llm1:zzz", "conv:1:llm0:a"):
        t = transition(s, ToolLost(operation_id=op, cause=LostCause.TIMED_OUT))
        assert t == Transition(s, (), WaitInput(), ignored=Ignored.OTHER_OPERATION)
    idle = answered()
    t = transition(idle, ToolLost(operation_id="conv:1:llm1:a", cause=LostCause.ANSWER_LOST))
    assert t == Transition(idle, (), WaitInput(), ignored=Ignored.NOT_AWAITED)


# -- Rewind ------------------------------------------------------------------------------------


def two_turns() -> tuple[RuntimeState, tuple[Span, ...]]:
    s = answered("one", "first answer")
    first_end = views.closed(s.committed.view, len(s.committed.log))
    t = transition(s, UserMessage(message=user("two")))
    ts, _ = stream(t.state, FauxResponse.text("second answer"))
    return ts[-1].state, first_end


def test_rewind_restores_an_earlier_turn_and_deletes_nothing() -> None:
    s, first_end = two_turns()
    log = s.committed.log
    assert len(log) == 4 and first_end == (Span(0, 2),)
    t = transition(s, Rewind(view=first_end))
    c = t.state.committed
    assert c == replace(
        s.committed,
        messages=log[:2],
        view=(Span(0, 2), Span(4)),
        status=Status.READY,
        commit=s.committed.commit + 1,
        last_commit_id=f"{CID}@{s.committed.commit + 1}",
        turn_starts=s.committed.turn_starts[:1],  # turn 2 is gone from the branch
        meter_basis=None,  # no call of the kept turn reported usage
    )
    assert c.log is log  # nothing lost
    assert t.appended == () and t.command == WaitInput()
    # The next turn appends after the abandoned messages in the log, and the model sees the
    # kept prefix followed by the new message.
    nxt = transition(t.state, start("two, again"))
    c2 = nxt.state.committed
    assert c2.log == (*log, user("two, again"))
    assert c2.messages == (*log[:2], user("two, again"))
    assert isinstance(nxt.command, CallLLM) and nxt.command.request.messages == c2.messages
    assert views.materialize(c2.view, c2.log) == c2.messages


def test_rewind_to_where_the_conversation_already_is_changes_nothing() -> None:
    s, _ = two_turns()
    here = views.closed(s.committed.view, len(s.committed.log))
    t = transition(s, Rewind(view=here))
    assert t == Transition(s, (), WaitInput(), ignored=Ignored.ALREADY_THERE)


def test_rewind_while_a_turn_is_in_flight_is_ignored() -> None:
    s, first_end = two_turns()
    busy = transition(s, UserMessage(message=user("three"))).state
    t = transition(busy, Rewind(view=first_end))
    assert t == Transition(busy, (), WaitInput(), ignored=Ignored.BUSY)


def test_a_rewind_outside_the_log_is_a_bug_not_a_silent_no_op() -> None:
    s, _ = two_turns()
    with pytest.raises(LoopError, match="outside a log of 4 messages"):
        transition(s, Rewind(view=(Span(0, 9),)))
    with pytest.raises(LoopError, match="empty"):
        transition(s, Rewind(view=()))


def test_a_rewind_after_a_rewind_can_go_back_to_any_published_view() -> None:
    s, first_end = two_turns()
    second_end = views.closed(s.committed.view, len(s.committed.log))
    back = transition(s, Rewind(view=first_end)).state
    forward = transition(back, Rewind(view=second_end))
    assert forward.state.committed.messages == s.committed.messages
    assert forward.state.committed.log == s.committed.log


# -- follow-ups with context and mode ------------------------------------------------------------


def test_a_follow_up_when_idle_starts_a_turn_with_its_own_context_and_mode() -> None:
    s = answered()
    ctx = TurnContext(rules=("new rule",), supplements=("attached",))
    t = transition(s, UserMessage(message=user("next"), context=ctx, mode="ask"))
    c = t.state.committed
    assert c.context == TurnContext(rules=("new rule",), mode="ask")
    assert c.messages[-1] == user("attached").__class__(
        content=(TextContent(text="attached"), TextContent(text="next"))
    )
    assert isinstance(t.command, CallLLM)
    assert "ask mode" in t.command.request.system_prompt
    names = [d.name for d in t.command.request.tools]
    assert names == [
        "Shell", "Read", "Write", "StrReplace", "Delete", "LS", "Grep", "Glob", "AwaitShell",
        "EditNotebook", "ReadLints", "TodoWrite", "AskQuestion", "Task",
    ]  # fmt: skip


def test_a_mode_alone_changes_only_the_mode_of_the_stored_context() -> None:
    s = transition(RuntimeState.new(CID), start("x", TurnContext(rules=("keep me",)))).state
    ts, _ = stream(s, FauxResponse.text("ok"))
    t = transition(ts[-1].state, UserMessage(message=user("plan it"), mode="plan"))
    assert t.state.committed.context == TurnContext(rules=("keep me",), mode="plan")


def test_a_follow_up_while_busy_queues_and_its_context_applies_from_the_next_call() -> None:
    s = at_tools([tool_call("a")])
    q = transition(s, UserMessage(message=user("also this"), mode="ask"))
    c = q.state.committed
    assert c.queued == (user("also this"),)
    assert c.queued_context == replace(c.context, mode="ask")  # type: ignore[type-var]
    assert c.context == s.committed.context  # the running call keeps its context
    t = transition(q.state, ToolResult(message=result("a")))
    assert isinstance(t.command, CallLLM)
    c2 = t.state.committed
    assert c2.context is not None and c2.context.mode == "ask"
    assert c2.queued == () and c2.queued_context is None
    assert c2.messages[-2:] == (result("a"), user("also this"))
    assert "ask mode" in t.command.request.system_prompt


def test_a_follow_up_without_context_or_mode_keeps_the_turns_context() -> None:
    s = at_tools([tool_call("a")])
    q = transition(s, UserMessage(message=user("more")))
    assert q.state.committed.queued_context is None


# -- a new conversation's history ----------------------------------------------------------------


def test_start_with_history_opens_the_log_of_a_new_conversation_only() -> None:
    earlier = (user("before"), result("x", "old"))
    t = transition(RuntimeState.new(CID), Start(user_message=user("now"), history=earlier))
    assert t.appended == (*earlier, user("now"))
    assert t.state.committed.log == t.state.committed.messages == t.appended
    s = answered()
    again = transition(s, Start(user_message=user("now"), history=earlier))
    assert again.appended == (user("now"),)


def test_conversation_state_defaults_to_the_whole_log() -> None:
    c = ConversationState.new(CID)
    assert c.view == (Span(0),) and c.log == () and c.messages == ()
    encoded = msgspec.json.encode(c)
    assert b"view" not in encoded  # the default view is not stored
    assert msgspec.json.decode(encoded, type=ConversationState) == c
