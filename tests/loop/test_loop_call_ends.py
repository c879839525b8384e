"""How a model call ends when its turn is stopped from outside, and what the loop decides of
the turn: the client's cancel, a newer run (Supersede), a client whose stream is gone for good
(ClientGone: an HTTP/2 stream closed, a RunSSE not reopened within its grace), and a run
stopped without a decision (Suspend: shutdown, the run moved to another replica). Each test
asserts the whole transition: its state, command and the call's end with its reason."""

from __future__ import annotations

import msgspec

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.loop import (
    AwaitLLM,
    CallEnd,
    CallOutcome,
    Cancel,
    Canceled,
    ClientGone,
    RuntimeState,
    Status,
    Supersede,
    Suspend,
    SuspendCause,
    Transition,
    transition,
)
from cursor_byok.loop.results import (
    CALL_CANCELED,
    CALL_MOVED,
    CALL_SHUTDOWN,
    CALL_STREAM_CLOSED,
    CALL_SUPERSEDED,
    CANCELED_RESULT_TEXT,
)
from tests.loop.loop_helpers import result, start, stream, tool_call

CID = "conv"
CALL = "conv:1:llm1"
replace = msgspec.structs.replace


def calling() -> RuntimeState:
    """A turn whose model call is streaming: a few deltas already applied (pending)."""
    t = transition(RuntimeState.new(CID), start("hello"))
    ts, _ = stream(t.state, FauxResponse.text("a long answer that never ends"))
    return ts[3].state  # start, text_start and two deltas in


def canceled_state(s: RuntimeState) -> RuntimeState:
    c = s.committed
    n = c.commit + 1
    return RuntimeState(
        committed=replace(
            c,
            status=Status.CANCELED,
            waiting=None,
            commit=n,
            last_commit_id=f"{CID}@{n}",
        )
    )


def test_the_clients_cancel_ends_the_call_canceled_by_the_client() -> None:
    s = calling()
    assert s.pending_response is not None
    assert transition(s, Cancel()) == Transition(
        canceled_state(s),
        (),
        Canceled(reason="canceled by the user"),
        call_end=CallEnd(CALL, CallOutcome.CANCELED, CALL_CANCELED),
    )
    t = transition(s, Cancel(reason="user pressed stop"))
    assert t.command == Canceled(reason="user pressed stop")
    assert t.call_end == CallEnd(CALL, CallOutcome.CANCELED, f"{CALL_CANCELED} (user pressed stop)")


def test_a_newer_run_ends_the_call_superseded() -> None:
    s = calling()
    assert transition(s, Supersede()) == Transition(
        canceled_state(s),
        (),
        Canceled(reason="a newer request for this conversation arrived"),
        call_end=CallEnd(CALL, CallOutcome.CANCELED, CALL_SUPERSEDED),
    )


def test_a_closed_stream_cancels_the_turn() -> None:
    s = calling()
    assert transition(s, ClientGone()) == Transition(
        canceled_state(s),
        (),
        Canceled(reason=CALL_STREAM_CLOSED),
        call_end=CallEnd(CALL, CallOutcome.CANCELED, CALL_STREAM_CLOSED),
    )


def test_a_runsse_not_reopened_within_its_grace_cancels_the_turn() -> None:
    s = calling()
    why = "canceled: the client did not reconnect within 60 s"
    assert transition(s, ClientGone(grace_s=60.0)) == Transition(
        canceled_state(s),
        (),
        Canceled(reason=why),
        call_end=CallEnd(CALL, CallOutcome.CANCELED, why),
    )


def test_a_gone_client_waiting_on_tools_gets_their_results_without_cards() -> None:
    ts, _ = stream(
        transition(RuntimeState.new(CID), start("hello")).state,
        FauxResponse.tool_calls([tool_call("a")]),
    )
    s = ts[-1].state
    t = transition(s, ClientGone())
    closing = replace(result("a", CANCELED_RESULT_TEXT), is_error=True)
    c = s.committed
    assert t.state.committed == replace(
        c,
        log=(*c.log, closing),
        messages=(*c.messages, closing),
        status=Status.CANCELED,
        waiting=None,
        commit=c.commit + 1,
        last_commit_id=f"{CID}@{c.commit + 1}",
    )
    assert t.local_results == ()  # nobody to show the cards to
    assert t.call_end is None and t.command == Canceled(reason=CALL_STREAM_CLOSED)


def test_a_shutdown_ends_the_call_and_decides_nothing_of_the_turn() -> None:
    s = calling()
    t = transition(s, Suspend(cause=SuspendCause.SHUTDOWN))
    assert t == Transition(
        s,
        (),
        Canceled(reason=CALL_SHUTDOWN),
        call_end=CallEnd(CALL, CallOutcome.CANCELED, CALL_SHUTDOWN),
    )
    assert t.state is s  # nothing to commit: a reopened run resends the same call
    assert isinstance(s.committed.waiting, AwaitLLM)


def test_a_run_moved_to_another_replica_ends_its_call_here() -> None:
    s = calling()
    assert transition(s, Suspend(cause=SuspendCause.MOVED)) == Transition(
        s,
        (),
        Canceled(reason=CALL_MOVED),
        call_end=CallEnd(CALL, CallOutcome.CANCELED, CALL_MOVED),
    )


def test_a_suspend_without_a_call_in_flight_ends_no_call() -> None:
    ts, _ = stream(
        transition(RuntimeState.new(CID), start("hello")).state,
        FauxResponse.tool_calls([tool_call("a")]),
    )
    waiting_tool = ts[-1].state
    idle = RuntimeState.new(CID)
    for s in (waiting_tool, idle):
        assert transition(s, Suspend(cause=SuspendCause.SHUTDOWN)) == Transition(
            s, (), Canceled(reason=CALL_SHUTDOWN)
        )
