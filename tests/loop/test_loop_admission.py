"""A person token's limits as loop inputs: the runtime answers each planned model call with an
admission (admitted, or `CallRefused{limit, message}`) before the call's commit, and the loop
decides (`admit`, loop/admission.py). Whole values, as h11's tests assert them."""

from __future__ import annotations

import msgspec
import pytest

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.loop import (
    ADMITTED,
    AwaitLLM,
    AwaitSummary,
    CallEnd,
    CallLLM,
    CallOutcome,
    CallRefused,
    Compact,
    ContextWindow,
    Failed,
    FailureKind,
    Ignored,
    Limit,
    LoopError,
    ResendLLM,
    Resume,
    RuntimeState,
    Status,
    Summarize,
    ToolResult,
    Transition,
    TurnContext,
    UserMessage,
    WaitInput,
    admit,
    transition,
)
from cursor_byok.loop.results import loop_failure
from tests.loop.loop_helpers import result, start, stream, tool_call, user

CID = "conv"
replace = msgspec.structs.replace
OVER = "token 'alice' has spent its monthly budget"


def refused(call_id: str, limit: Limit = Limit.BUDGET, message: str = OVER) -> CallRefused:
    return CallRefused(call_id=call_id, limit=limit, message=message)


def failed(limit: Limit = Limit.BUDGET, message: str = OVER) -> Failed:
    return Failed(message=loop_failure(message), kind=FailureKind.REFUSED, limit=limit)


def at_tools() -> RuntimeState:
    s = transition(RuntimeState.new(CID), start("hello")).state
    ts, _ = stream(s, FauxResponse.tool_calls([tool_call("a", "Shell", command="echo hi")]))
    return ts[-1].state


def test_admitted_is_the_planned_transition_itself() -> None:
    s = RuntimeState.new(CID)
    planned = transition(s, start("hello"))
    assert admit(s, planned, ADMITTED) is planned


def test_a_refused_opening_call_leaves_the_conversation_as_it_was() -> None:
    # The turn does not begin: the client sends the same message again.
    s = RuntimeState.new(CID)
    planned = transition(s, start("hello"))
    assert isinstance(planned.command, CallLLM)
    t = admit(s, planned, refused(planned.command.call_id, Limit.MODELS, "not that model"))
    assert t == Transition(s, (), failed(Limit.MODELS, "not that model"))
    # A follow-up that opens a turn on an idle conversation: the same.
    ts, _ = stream(planned.state, FauxResponse.text("hi"))
    idle = ts[-1].state
    follow = transition(idle, UserMessage(message=user("again")))
    assert isinstance(follow.command, CallLLM)
    t = admit(idle, follow, refused(follow.command.call_id, Limit.RATE, "too fast"))
    assert t == Transition(idle, (), failed(Limit.RATE, "too fast"))


def test_a_refusal_after_a_tool_answer_commits_the_answer_and_fails_the_turn() -> None:
    s = at_tools()
    answer = result("a", "Exit code: 0\nstdout:\nhi", name="Shell")
    planned = transition(s, ToolResult(message=answer))
    assert isinstance(planned.command, CallLLM) and planned.command.call_id == "conv:1:llm2"
    t = admit(s, planned, refused("conv:1:llm2"))
    c = s.committed
    assert t == Transition(
        RuntimeState(
            committed=replace(
                c,
                messages=(*c.messages, answer),
                log=(*c.log, answer),
                waiting=None,
                status=Status.FAILED,
                llm_calls=2,
                commit=c.commit + 2,  # the planned commit and the refusal's: stored as one
                last_commit_id=f"{CID}@{c.commit + 2}",
            )
        ),
        (),
        failed(),
        appended=(answer,),
    )  # no call_end: the refused call was never recorded


def test_a_refusal_after_steering_keeps_the_answer_and_the_queued_message() -> None:
    s = transition(RuntimeState.new(CID), start("hello")).state
    steering = transition(s, UserMessage(message=user("also this"))).state
    ts, events = stream(steering, FauxResponse.text("first answer"))
    before, done = ts[-2].state, ts[-1]
    assert isinstance(done.command, CallLLM) and done.command.call_id == "conv:1:llm2"
    t = admit(before, done, refused("conv:1:llm2"))
    c = t.state.committed
    assert [m.text for m in c.log] == ["hello", "first answer", "also this"]
    assert (c.status, c.waiting, c.queued, t.command) == (Status.FAILED, None, (), failed())
    assert t.emit == (events[-1],)  # the done event is still published
    assert t.call_end == CallEnd("conv:1:llm1", CallOutcome.COMMITTED)  # the answered call
    assert t.appended == c.log[1:]


def test_a_resumed_call_refused_ends_its_record() -> None:
    s = transition(RuntimeState.new(CID), start("hello")).state
    waiting = s.committed.waiting
    assert isinstance(waiting, AwaitLLM)
    planned = transition(s, Resume())
    assert planned.command == ResendLLM(
        call_id=waiting.call_id, messages_hash=waiting.messages_hash
    )
    t = admit(s, planned, refused(waiting.call_id, Limit.REVOKED, "revoked"))
    c = s.committed
    assert t == Transition(
        RuntimeState(
            committed=replace(
                c,
                waiting=None,
                status=Status.FAILED,
                commit=c.commit + 1,
                last_commit_id=f"{CID}@{c.commit + 1}",
            )
        ),
        (),
        failed(Limit.REVOKED, "revoked"),
        call_end=CallEnd(waiting.call_id, CallOutcome.FAILED, "revoked"),
    )


def test_a_refused_summary_call_fails_the_turn() -> None:
    window = ContextWindow(tokens=100_000)
    s = transition(RuntimeState.new(CID), start("one", TurnContext(window=window))).state
    ts, _ = stream(s, FauxResponse.text("first"))
    s = transition(ts[-1].state, UserMessage(message=user("two"))).state
    ts, _ = stream(s, FauxResponse.text("second"))
    idle = ts[-1].state
    planned = transition(idle, Compact())
    assert isinstance(planned.command, Summarize)
    call_id = planned.command.call_id
    assert isinstance(planned.state.committed.waiting, AwaitSummary)
    # /summarize opens no turn: the refusal fails it, committed.
    t = admit(idle, planned, refused(call_id))
    c = idle.committed
    assert t.state.committed == replace(
        c,
        llm_calls=c.llm_calls + 1,
        status=Status.FAILED,
        commit=c.commit + 2,
        last_commit_id=f"{CID}@{c.commit + 2}",
    )
    assert (t.command, t.call_end, t.appended) == (failed(), None, ())
    # Resumed in Summarizing: the same, and the recorded summary call ends failed.
    summarizing = planned.state
    resumed = transition(summarizing, Resume())
    assert isinstance(resumed.command, Summarize)
    t = admit(summarizing, resumed, refused(call_id))
    assert t.call_end == CallEnd(call_id, CallOutcome.FAILED, OVER)
    assert t.state.committed.status == Status.FAILED and t.command == failed()


def test_a_refusal_of_a_call_not_awaited_is_ignored() -> None:
    idle = RuntimeState.new(CID)
    t = transition(idle, refused("conv:0:llm1"))
    assert t == Transition(idle, (), WaitInput(), ignored=Ignored.NOT_AWAITED)
    s = transition(idle, start("hello")).state
    t = transition(s, refused("conv:1:llm9"))
    assert t == Transition(s, (), WaitInput(), ignored=Ignored.OTHER_CALL)
    # An admission of another call than the one planned is a bug of whoever built it.
    planned = transition(s, Resume())
    with pytest.raises(LoopError):
        admit(s, planned, refused("conv:1:llm9"))
