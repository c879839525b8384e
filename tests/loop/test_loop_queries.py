"""The loop's rules for the interaction-query tools: a saved plan ends the turn and is
recorded, an approved mode switch changes the next model call's mode, a Build opens its turn
with the plan (reference §3.1, §3.3)."""

from __future__ import annotations

import msgspec

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.loop import (
    CallLLM,
    Final,
    ModeSwitched,
    PlanBuild,
    PlanCreated,
    PlanMark,
    PlanRecord,
    RuntimeState,
    Start,
    Status,
    ToolResult,
    TurnContext,
    UserMessage,
    transition,
)
from cursor_byok.loop import view as views
from cursor_byok.loop.catalogue import Mode, offered
from cursor_byok.loop.inputs import Rewind
from cursor_byok.loop.view import Span
from tests.loop.loop_helpers import result, start, stream, tool_call, user

CID = "conv"
PLAN = "# Cache\n\n1. Add it."


def at_tools(calls: list[object], mode: str = "agent") -> RuntimeState:
    t = transition(RuntimeState.new(CID), start("go", TurnContext(mode=mode)))
    ts, _ = stream(t.state, FauxResponse.tool_calls(calls))  # type: ignore[arg-type]
    return ts[-1].state


def saved(call_id: str = "p1") -> ToolResult:
    return ToolResult(
        message=result(call_id, "saved", name="CreatePlan"),
        effect=PlanCreated(plan=PLAN, uri="file:///p.plan.md", name="Cache"),
    )


def test_a_saved_plan_is_recorded_and_ends_the_turn_without_a_model_call() -> None:
    s = at_tools([tool_call("p1", "CreatePlan", plan=PLAN)], mode="plan")
    t = transition(s, saved())
    assert isinstance(t.command, Final)
    c = t.state.committed
    assert c.status == Status.FINAL and c.waiting is None
    assert c.plan == PlanRecord(text=PLAN, uri="file:///p.plan.md", name="Cache")
    assert c.plans == (PlanMark(at=len(c.log) - 1, plan=c.plan),)  # at its tool result
    assert c.messages[-1].text == "saved"  # type: ignore[union-attr]


def test_the_turn_ends_only_after_the_other_calls_of_the_message() -> None:
    calls = [tool_call("p1", "CreatePlan", plan=PLAN), tool_call("r1", "Read", path="a")]
    s = at_tools(calls, mode="plan")
    t = transition(s, saved())
    assert not isinstance(t.command, Final)  # the Read goes to the client first
    t2 = transition(t.state, ToolResult(message=result("r1")))
    assert isinstance(t2.command, Final) and t2.state.committed.plan is not None


def test_a_steering_message_keeps_the_turn_going_after_a_plan() -> None:
    s = at_tools([tool_call("p1", "CreatePlan", plan=PLAN)], mode="plan")
    s = transition(s, UserMessage(message=user("also cover errors"))).state
    t = transition(s, saved())
    assert isinstance(t.command, CallLLM)
    assert t.state.committed.plan is not None


def test_an_error_result_has_no_effect() -> None:
    s = at_tools([tool_call("p1", "CreatePlan", plan=PLAN)], mode="plan")
    failed = msgspec.structs.replace(
        saved(), message=result("p1", "Error", name="CreatePlan", error=True)
    )
    t = transition(s, failed)
    assert isinstance(t.command, CallLLM)
    assert t.state.committed.plan is None


def test_an_approved_switch_changes_the_next_model_calls_mode_and_tools() -> None:
    s = at_tools([tool_call("m1", "SwitchMode", target_mode_id="plan")])
    answer = ToolResult(message=result("m1", "ok", name="SwitchMode"), effect=ModeSwitched("plan"))
    t = transition(s, answer)
    assert isinstance(t.command, CallLLM)
    assert t.state.committed.context is not None and t.state.committed.context.mode == "plan"
    names = [d.name for d in t.command.request.tools]
    assert names == list(offered(Mode.PLAN))
    assert "plan mode" in t.command.request.system_prompt


def test_a_build_opens_its_turn_with_the_recorded_plan() -> None:
    s = at_tools([tool_call("p1", "CreatePlan", plan=PLAN)], mode="plan")
    s = transition(s, saved()).state
    build = Start(user_message=user(""), context=TurnContext(), build=PlanBuild())
    t = transition(s, build)
    assert isinstance(t.command, CallLLM)
    text = t.state.committed.messages[-1].text  # type: ignore[union-attr]
    assert text == (
        "The user pressed Build: carry out this plan now, step by step, and report what you "
        f"did. It is saved at file:///p.plan.md.\n\n<plan>\n{PLAN}\n</plan>"
    )
    assert "Shell" in [d.name for d in t.command.request.tools]


def test_the_ides_plan_wins_over_the_recorded_one() -> None:
    s = at_tools([tool_call("p1", "CreatePlan", plan=PLAN)], mode="plan")
    s = transition(s, saved()).state
    build = Start(user_message=user(""), build=PlanBuild(plan="# Edited", uri="file:///q.md"))
    text = transition(s, build).state.committed.messages[-1].text  # type: ignore[union-attr]
    assert "<plan>\n# Edited\n</plan>" in text and "file:///q.md" in text


def test_a_build_without_any_plan_asks_to_read_the_file() -> None:
    build = Start(user_message=user(""), build=PlanBuild(uri="file:///r.md"))
    text = transition(RuntimeState.new(CID), build).state.committed.messages[-1].text  # type: ignore[union-attr]
    assert "Read it from file:///r.md first." in text


def test_plan_mode_tells_the_model_to_hand_the_plan_over_with_create_plan() -> None:
    t = transition(RuntimeState.new(CID), start("go", TurnContext(mode="plan")))
    assert isinstance(t.command, CallLLM)
    assert "hand it to the user with CreatePlan" in t.command.request.system_prompt


PLAN_2 = "# Cache, revised\n\n1. Measure first.\n2. Add it."
PLAN_1_RECORD = PlanRecord(text=PLAN, uri="file:///p.plan.md", name="Cache")
PLAN_2_RECORD = PlanRecord(text=PLAN_2, uri="file:///p2.plan.md", name="Cache", overview="v2")


def two_plan_turns() -> tuple[RuntimeState, RuntimeState]:
    """Turn one saves PLAN, turn two (a follow-up) saves PLAN_2: the state after each."""
    turn1 = transition(at_tools([tool_call("p1", "CreatePlan", plan=PLAN)], mode="plan"), saved())
    assert isinstance(turn1.command, Final)
    follow = transition(turn1.state, start("revise it", TurnContext(mode="plan")))
    ts, _ = stream(
        follow.state, FauxResponse.tool_calls([tool_call("p2", "CreatePlan", plan=PLAN_2)])
    )
    answer = ToolResult(
        message=result("p2", "saved again", name="CreatePlan"),
        effect=PlanCreated(plan=PLAN_2, uri="file:///p2.plan.md", overview="v2"),  # no name: kept
    )
    turn2 = transition(ts[-1].state, answer)
    assert isinstance(turn2.command, Final)
    return turn1.state, turn2.state


def test_a_rewind_restores_the_plan_of_the_kept_turn_and_none_before_any() -> None:
    turn1, turn2 = two_plan_turns()
    c1, c2 = turn1.committed, turn2.committed
    assert c1.plan == PLAN_1_RECORD
    assert c2.plan == PLAN_2_RECORD
    assert c2.plans == (
        PlanMark(at=len(c1.log) - 1, plan=PLAN_1_RECORD),
        PlanMark(at=len(c2.log) - 1, plan=PLAN_2_RECORD),
    )
    first_end = views.closed(c1.view, len(c1.log))
    back = transition(turn2, Rewind(view=first_end)).state.committed
    assert (
        back
        == msgspec.structs.replace(
            c2,
            view=views.reopened(first_end, len(c2.log)),
            messages=c1.messages,
            plan=PLAN_1_RECORD,  # the plan as it was at the end of turn one
            status=Status.READY,
            commit=c2.commit + 1,
            last_commit_id=f"{CID}@{c2.commit + 1}",
            turn_starts=c2.turn_starts[:1],  # turn two is gone from the branch
            meter_basis=None,  # no call of the kept turn reported usage
        )
    )
    # A Build after the rewind carries out turn one's plan.
    build = Start(user_message=user(""), context=TurnContext(), build=PlanBuild())
    text = transition(RuntimeState.of(back), build).state.committed.messages[-1].text  # type: ignore[union-attr]
    assert f"<plan>\n{PLAN}\n</plan>" in text and "file:///p.plan.md" in text
    # Forward again to turn two's view: its plan comes back with it.
    second_end = views.closed(c2.view, len(c2.log))
    fwd = transition(RuntimeState.of(back), Rewind(view=second_end)).state.committed
    assert fwd.plan == PLAN_2_RECORD and fwd.plans == c2.plans
    # Back to before the first turn: no plan at all, and a Build has none to fall back on.
    zero = transition(turn2, Rewind(view=(Span(0, 0),))).state.committed
    assert zero == msgspec.structs.replace(
        c2,
        view=views.reopened((Span(0, 0),), len(c2.log)),
        messages=(),
        plan=None,
        status=Status.READY,
        commit=c2.commit + 1,
        last_commit_id=f"{CID}@{c2.commit + 1}",
        turn_starts=(),  # no turn had ended there
        meter_basis=None,
    )
    build = Start(user_message=user(""), build=PlanBuild(uri="file:///r.md"))
    text = transition(RuntimeState.of(zero), build).state.committed.messages[-1].text  # type: ignore[union-attr]
    assert "Read it from file:///r.md first." in text


def test_the_plans_round_trip_through_the_states_json() -> None:
    _, turn2 = two_plan_turns()
    c = turn2.committed
    again = msgspec.json.decode(msgspec.json.encode(c), type=type(c))
    assert again.plans == c.plans and again.plan == c.plan


STEPS = [{"id": "s1", "content": "Add the cache"}, {"id": "s2", "content": "Test it"}]


def test_after_build_the_plans_steps_are_the_todo_list_and_a_merge_extends_them() -> None:
    """Issue 24 §5: the first TodoWrite merge after a Build holds the plan's steps plus the
    new item; a view of before the Build (a rewind) has the list of then, and replaying the
    view gives the committed list (derived.todos_in_view)."""
    from cursor_byok.loop import derived
    from cursor_byok.loop.todos import TodoItem, TodoStatus, plan_todos

    steps = plan_todos(STEPS)
    assert [t.id for t in steps] == ["s1", "s2"]
    s = at_tools([tool_call("p1", "CreatePlan", plan=PLAN, todos=STEPS)], mode="plan")
    planned = ToolResult(
        message=result("p1", "saved", name="CreatePlan"),
        effect=PlanCreated(plan=PLAN, uri="file:///p.plan.md", name="Cache", todos=steps),
    )
    s = transition(s, planned).state
    assert s.committed.plan is not None and s.committed.plan.todos == steps
    before_build = s.committed
    build = Start(user_message=user(""), context=TurnContext(), build=PlanBuild())
    t = transition(s, build)
    assert t.state.committed.todos == steps
    merge = tool_call(
        "w1",
        "TodoWrite",
        todos=[{"id": "s3", "content": "Document it", "status": "pending"}],
        merge=True,
    )
    ts, _ = stream(t.state, FauxResponse.tool_calls([merge]))
    c = ts[-1].state.committed
    pending = TodoStatus.PENDING
    assert c.todos == (*steps, TodoItem("s3", "Document it", pending))
    assert derived.todos_in_view(c, c.view) == c.todos
    earlier = (Span(0, len(before_build.log)),)
    assert derived.todos_in_view(c, earlier) == before_build.todos == ()
