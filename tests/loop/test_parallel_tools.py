"""The tool calls of one response run together: the loop's set of outstanding operations, the
results in call order whatever order they come in, an effect applied where its result lands,
a lost call among others, and a resume that settles each outstanding call by its record."""

from __future__ import annotations

from msgspec.structs import replace

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.loop import (
    AwaitClient,
    CallClient,
    CallClients,
    CallLLM,
    Checkpoint,
    Final,
    LostCause,
    PlanCreated,
    PlanMark,
    Resume,
    RuntimeState,
    ToolLost,
    ToolOperation,
    ToolResult,
    TurnContext,
    WaitInput,
    transition,
)

from .loop_helpers import result, start, stream, tool_call

CID = "conv"
OP = "conv:1:llm1:"


def at_tools(*calls: object, mode: str = "agent") -> RuntimeState:
    t = transition(RuntimeState.new(CID), start("go", TurnContext(mode=mode)))
    ts, _ = stream(t.state, FauxResponse.tool_calls(list(calls)))  # type: ignore[arg-type]
    return ts[-1].state


def waiting(s: RuntimeState) -> AwaitClient:
    w = s.committed.waiting
    assert isinstance(w, AwaitClient)
    return w


def test_a_local_answer_between_client_calls_keeps_the_call_order() -> None:
    s = at_tools(tool_call("a"), tool_call("u", "NoSuchTool"), tool_call("b"))
    w = waiting(s)
    assert w.outstanding == (OP + "a", OP + "b") and w.next == 0
    assert [r.tool_call_id for r in w.early] == ["u"]  # the loop's answer, held after "a"
    t = transition(s, ToolResult(message=result("b", "B")))
    assert t.command == WaitInput() and t.appended == ()
    t = transition(t.state, ToolResult(message=result("a", "A")))
    assert isinstance(t.command, CallLLM)
    assert [m.tool_call_id for m in t.appended] == ["a", "u", "b"]  # type: ignore[union-attr]
    assert [m.text for m in t.appended] == ["A", t.appended[1].text, "B"]  # type: ignore[union-attr]


def test_the_mid_turn_checkpoint_lists_only_the_calls_the_client_owes() -> None:
    t = transition(RuntimeState.new(CID), start("go"))
    ts, _ = stream(t.state, FauxResponse.tool_calls([tool_call("a"), tool_call("u", "Nope")]))
    assert ts[-1].checkpoint == Checkpoint(pending_tool_calls=("a",))


def test_an_effect_applies_where_its_result_joins_the_history() -> None:
    s = at_tools(
        tool_call("r1", "Read", path="a"),
        tool_call("p1", "CreatePlan", plan="# P"),
        mode="plan",
    )
    saved = ToolResult(
        message=result("p1", "saved", name="CreatePlan"),
        effect=PlanCreated(plan="# P", uri="file:///p.plan.md"),
    )
    t = transition(s, saved)  # the plan is saved before the Read answers
    assert t.command == WaitInput() and t.state.committed.plan is None
    t = transition(t.state, ToolResult(message=result("r1")))
    assert isinstance(t.command, Final)  # the plan ends the turn, once every call answered
    c = t.state.committed
    assert c.plan is not None and c.plan.text == "# P"
    assert c.plans == (PlanMark(at=len(c.log) - 1, plan=c.plan),)  # at its own result
    assert c.log[-1].tool_call_id == "p1"  # type: ignore[union-attr]


def test_a_timed_out_call_among_others_ends_alone() -> None:
    s = at_tools(tool_call("a"), tool_call("b"), tool_call("c"))
    lost = ToolLost(operation_id=OP + "b", cause=LostCause.TIMED_OUT, waited_ms=1000)
    t = transition(s, lost)
    assert t.command == WaitInput() and t.appended == ()
    assert waiting(t.state).outstanding == (OP + "a", OP + "c")
    assert [r.call.id for r in t.local_results] == ["b"]
    t = transition(t.state, ToolResult(message=result("c")))
    t = transition(t.state, ToolResult(message=result("a")))
    assert isinstance(t.command, CallLLM)
    assert [m.tool_call_id for m in t.appended] == ["a", "b", "c"]  # type: ignore[union-attr]
    assert t.appended[1].is_error  # type: ignore[union-attr]


def test_a_resume_settles_each_outstanding_call_by_its_record() -> None:
    s = at_tools(tool_call("a"), tool_call("s", "Shell", command="touch x"), tool_call("c"))
    records = (
        ToolOperation(operation_id=OP + "a", sent=True, result=result("a", "A")),  # answered
        ToolOperation(operation_id=OP + "s", sent=True),  # ran, its answer lost
        # "c": no record (never went out)
    )
    t = transition(s, Resume(operation=records[0], operations=records))
    # The Shell is never run twice: its outcome is unknown; "c" goes out now, alone.
    assert t.command == CallClient(
        operation_id=OP + "c", tool_call=tool_call("c"), llm_call_id="conv:1:llm1", content_index=2
    )
    assert [r.call.id for r in t.local_results] == ["s"]
    assert "outcome is unknown" in t.local_results[0].result.text.lower()
    assert [m.tool_call_id for m in t.appended] == ["a", "s"]  # type: ignore[union-attr]
    assert waiting(t.state).outstanding == (OP + "c",)
    t = transition(t.state, ToolResult(message=result("c")))
    assert isinstance(t.command, CallLLM)


def test_a_resume_that_knows_nothing_sends_every_outstanding_call_again() -> None:
    s = at_tools(tool_call("a"), tool_call("b"))
    t = transition(s, Resume())
    assert t.state is s  # nothing committed
    assert isinstance(t.command, CallClients)
    assert [c.operation_id for c in t.command.calls] == [OP + "a", OP + "b"]


def test_a_state_stored_before_outstanding_existed_still_takes_its_answer() -> None:
    s = at_tools(tool_call("a"), tool_call("b"))
    after_a = transition(s, ToolResult(message=result("a"))).state.committed
    # then one call at a time: "a" answered, "b" on the client, no `outstanding`
    w = replace(waiting(s), next=1, operation_id=OP + "b", outstanding=())
    old = RuntimeState.of(replace(after_a, waiting=w))
    assert waiting(old).unanswered() == (OP + "b",)
    t = transition(old, ToolResult(message=result("b")))
    assert isinstance(t.command, CallLLM)
    assert [m.tool_call_id for m in t.appended] == ["b"]  # type: ignore[union-attr]
