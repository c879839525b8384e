"""Fallback models in the loop: a call that failed before its first output (a lone `error`)
is repeated on the context's next fallback model, as a new call; a call that had output never
is; the turn's next call goes back to the run's own model."""

from __future__ import annotations

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.loop import (
    AwaitLLM,
    CallClient,
    CallEnd,
    CallLLM,
    CallOutcome,
    Failed,
    Final,
    ResendLLM,
    Resume,
    RuntimeState,
    ToolResult,
    Transition,
    TurnContext,
    ids,
    transition,
)

from .loop_helpers import result, start, stream, tool_call

CONTEXT = TurnContext(fallbacks=("backup", "last-resort"))


def started(context: TurnContext = CONTEXT) -> tuple[RuntimeState, CallLLM]:
    t = transition(RuntimeState.new("conv"), start("hello", context))
    assert isinstance(t.command, CallLLM)
    return t.state, t.command


def refused(state: RuntimeState, text: str = "HTTP 503: overloaded") -> Transition:
    ts, _ = stream(state, FauxResponse.error(text, started=False))
    assert len(ts) == 1
    return ts[0]


def test_a_failure_before_output_falls_back_to_the_next_model() -> None:
    s0, first = started()
    assert first.model == "" and first.fallback_of == ""
    t = refused(s0)
    command = t.command
    assert isinstance(command, CallLLM)
    assert command.call_id == "conv:1:llm1:fb1" == ids.fallback_call_id(first.call_id, 1)
    assert (command.model, command.fallback_of) == ("backup", "conv:1:llm1")
    # The same step: the same messages, prompt and tools, on another model.
    assert command.request == first.request and command.messages_hash == first.messages_hash
    assert t.emit == ()  # the client hears nothing of the failed call
    assert t.call_end == CallEnd("conv:1:llm1", CallOutcome.FAILED, "HTTP 503: overloaded")
    c = t.state.committed
    assert c.waiting == AwaitLLM(
        "conv:1:llm1:fb1", first.messages_hash, fallback=1, prompt=command.prompt
    )
    assert command.prompt == first.prompt  # the same request, the same meter
    assert c.llm_calls == 1 and c.status == "WaitingLLM"
    assert c.messages == s0.committed.messages


def test_fallbacks_are_tried_in_order_then_the_turn_fails_with_the_last_error() -> None:
    s0, _ = started()
    t1 = refused(s0)
    t2 = refused(t1.state, "backup: HTTP 500")
    assert isinstance(t2.command, CallLLM)
    assert (t2.command.call_id, t2.command.model) == ("conv:1:llm1:fb2", "last-resort")
    assert t2.command.fallback_of == "conv:1:llm1:fb1"
    t3 = refused(t2.state, "last-resort: connection refused")
    assert isinstance(t3.command, Failed)
    assert t3.command.message.error_message == "last-resort: connection refused"
    assert t3.call_end == CallEnd(
        "conv:1:llm1:fb2", CallOutcome.FAILED, "last-resort: connection refused"
    )
    assert t3.state.committed.status == "Failed"


def test_no_fallback_after_output() -> None:
    s0, _ = started()
    ts, events = stream(s0, FauxResponse.error("mid-stream failure", text="partial answer"))
    last = ts[-1]
    assert isinstance(last.command, Failed)
    assert last.emit == (events[-1],)
    assert last.state.committed.status == "Failed"


def test_no_fallback_configured_fails_as_before() -> None:
    s0, _ = started(TurnContext())
    assert isinstance(refused(s0).command, Failed)


def test_the_fallback_answer_ends_the_turn() -> None:
    s0, _ = started()
    t = refused(s0)
    ts, events = stream(t.state, FauxResponse.text("from the backup"))
    assert isinstance(ts[-1].command, Final)
    assert ts[-1].call_end == CallEnd("conv:1:llm1:fb1", CallOutcome.COMMITTED)
    assert ts[-1].state.committed.messages[-1] == events[-1].message  # type: ignore[union-attr]


def test_the_next_call_goes_back_to_the_first_model() -> None:
    s0, _ = started()
    t = refused(s0)
    ts, _ = stream(t.state, FauxResponse.tool_calls([tool_call("r1")]))
    assert isinstance(ts[-1].command, CallClient)
    assert ts[-1].command.llm_call_id == "conv:1:llm1:fb1"
    t2 = transition(ts[-1].state, ToolResult(message=result("r1")))
    assert isinstance(t2.command, CallLLM)
    assert (t2.command.call_id, t2.command.model, t2.command.fallback_of) == ("conv:1:llm2", "", "")
    assert t2.state.committed.waiting == AwaitLLM(
        "conv:1:llm2", t2.command.messages_hash, prompt=t2.command.prompt
    )
    # And it falls back afresh, from the first fallback.
    t3 = refused(t2.state)
    assert isinstance(t3.command, CallLLM)
    assert (t3.command.call_id, t3.command.model) == ("conv:1:llm2:fb1", "backup")


def test_a_fallback_is_not_counted_in_max_llm_calls() -> None:
    s0, _ = started(TurnContext(fallbacks=("backup",), max_llm_calls=1))
    t = refused(s0)
    assert isinstance(t.command, CallLLM) and t.state.committed.llm_calls == 1


def test_a_resumed_fallback_is_resent_to_its_model() -> None:
    s0, _ = started()
    t = refused(s0)
    resumed = transition(t.state, Resume())
    assert resumed.command == ResendLLM(
        call_id="conv:1:llm1:fb1",
        messages_hash=t.state.committed.waiting.messages_hash,  # type: ignore[union-attr]
        model="backup",
    )
    first = transition(s0, Resume())
    assert isinstance(first.command, ResendLLM) and first.command.model == ""


def test_fallback_ids_round_trip() -> None:
    assert ids.fallback_of("c:1:llm3:fb2") == ("c:1:llm3", 2)
    assert ids.fallback_of("c:1:llm3") is None
    assert ids.fallback_of("c:fbx:llm1") is None
    assert ids.fallback_of("c:1:llm1:fb") is None
