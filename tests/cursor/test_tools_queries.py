"""The interaction-query tools on the dialect's side: `ClientLink` sends their query under an
interaction id and routes the response with that id to the call's machine; anything else about
interaction responses stays as it was (issue 14, points 3-5, 9)."""

from __future__ import annotations

from cursor_byok.llm.types import ToolCall
from cursor_byok.loop import ModeSwitched, PlanCreated
from cursor_byok.transport.cursor import (
    ClientLink,
    InteractionAnswered,
    ToolFinished,
)
from cursor_byok.transport.cursor.proto import agent_pb2 as a


def link() -> ClientLink:
    return ClientLink(conversation_id="c", now_ms=lambda: 5)


def start(lk: ClientLink, tool: str, mode: str = "agent", **args: object) -> a.InteractionQuery:
    call = ToolCall(id="call_1", name=tool, arguments=dict(args))
    started = lk.start_tool("op", call, llm_call_id="m1", content_index=0, mode=mode)
    assert started.early is None
    first, query = (a.AgentServerMessage.FromString(f) for f in started.frames)
    assert first.interaction_update.WhichOneof("message") == "tool_call_started"
    assert query.WhichOneof("message") == "interaction_query"
    return query.interaction_query


def respond(query_id: int, **variant: object) -> a.AgentClientMessage:
    return a.AgentClientMessage(interaction_response=a.InteractionResponse(id=query_id, **variant))


def test_a_query_takes_an_interaction_id_and_its_response_finishes_the_call() -> None:
    lk = link()
    assert lk.next_interaction_id() == 1  # one the runtime asked itself
    query = start(lk, "SwitchMode", target_mode_id="plan")
    assert query.id == 2 and query.switch_mode_request_query.args.target_mode_id == "plan"
    approved = a.SwitchModeRequestResponse(approved=a.SwitchModeRequestResponse.Approved())
    done = lk.receive(respond(2, switch_mode_request_response=approved))
    assert isinstance(done, ToolFinished) and done.effect == ModeSwitched(mode="plan")
    assert not lk.tool_running("op")
    # A second answer to the same id: nothing waits on it any more (the runtime's waiters
    # say so: it is an InteractionAnswered nobody resolves).
    late = lk.receive(respond(2, switch_mode_request_response=approved))
    assert isinstance(late, InteractionAnswered) and late.id == 2


def test_a_response_to_a_query_the_runtime_asked_is_still_an_interaction_answer() -> None:
    lk = link()
    start(lk, "AskQuestion", questions=[{"id": "q", "prompt": "?", "options": []}])
    response = a.WebSearchRequestResponse(approved=a.WebSearchRequestResponse.Approved())
    answer = lk.receive(respond(7, web_search_request_response=response))
    assert answer == InteractionAnswered(
        id=7, kind="web_search_request_response", fields={"approved": {}}
    )
    assert lk.tool_running("op")


def test_after_an_abort_the_answer_is_not_taken_and_no_frame_is_sent() -> None:
    lk = link()
    query = start(lk, "CreatePlan", mode="plan", plan="# P")
    assert lk.abort_tool("op") == ()  # a query has no abort message
    result = a.CreatePlanResult(success=a.CreatePlanSuccess(), plan_uri="file:///p")
    late = lk.receive(
        respond(query.id, create_plan_request_response=a.CreatePlanRequestResponse(result=result))
    )
    # Not the call's any more: an answer for the runtime's waiters, where nobody waits.
    assert isinstance(late, InteractionAnswered) and late.id == query.id


def test_a_saved_plan_carries_its_effect() -> None:
    lk = link()
    query = start(lk, "CreatePlan", mode="plan", plan="# P", name="Plan P", overview="o")
    result = a.CreatePlanResult(success=a.CreatePlanSuccess(), plan_uri="file:///p")
    done = lk.receive(
        respond(query.id, create_plan_request_response=a.CreatePlanRequestResponse(result=result))
    )
    assert isinstance(done, ToolFinished) and not done.result.is_error
    assert done.effect == PlanCreated(plan="# P", uri="file:///p", name="Plan P", overview="o")


def test_unusable_arguments_send_no_query() -> None:
    lk = link()
    for name, args, text in [
        ("AskQuestion", {"questions": []}, "needs a non-empty questions array"),
        ("SwitchMode", {"target_mode_id": "debug"}, "can switch to agent or plan, not 'debug'"),
        ("SwitchMode", {"target_mode_id": "agent"}, "already in agent mode"),
        ("CreatePlan", {}, "missing the required string argument(s) plan"),
    ]:
        call = ToolCall(id="call_1", name=name, arguments=args)
        started = lk.start_tool(name, call, llm_call_id="m1", content_index=0)
        assert len(started.frames) == 1 and started.early is not None, name
        assert text in started.early.result.text and started.early.result.is_error
