"""The loop's turn marks (`turn_starts`) and the meter it keeps (`meter_basis`): a rewind to any
turn, in any compaction epoch, restores that turn's view from the marks; a checkpoint's meter
is the last model call's, read in O(1); a mid-turn checkpoint after each model call that
changed the history, with the calls still unanswered."""

from __future__ import annotations

from msgspec.structs import replace

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import Usage
from cursor_byok.loop import (
    CallClients,
    CallLLM,
    Checkpoint,
    Final,
    Ignored,
    MeterBasis,
    Rewind,
    RuntimeState,
    Span,
    Summarize,
    SummaryDone,
    ToolResult,
    TurnMarksFound,
    TurnStart,
    WaitInput,
    transition,
    wants_turn_marks,
)
from cursor_byok.loop import view as views
from cursor_byok.loop.derived import turn_ends
from cursor_byok.loop.meter import PromptChars, measure, meter_of_state

from .loop_helpers import result, start, stream, tool_call
from .test_loop_compaction import (
    CTX,
    FIXED,
    WINDOW,
    answer,
    encode_messages,
    summary_answer,
    words,
)


def used(i: int) -> int:
    """What a provider counts for turn i's request: about what we estimate (450 a message)."""
    return FIXED + 450 * (2 * i + 1)


def compacted() -> tuple[RuntimeState, list[tuple[Span, ...]], CallLLM]:
    """Three turns, then a fourth that is compacted first: (its state after the answer, the
    closed view at the end of each of the first three turns, turn 2's request)."""
    s = RuntimeState.new("c")
    ends: list[tuple[Span, ...]] = []
    second: CallLLM | None = None
    for i in range(3):
        t = transition(s, start(words(300, f"q{i}"), CTX))
        assert isinstance(t.command, CallLLM)
        if i == 1:
            second = t.command
        s = answer(t.state, words(300, f"a{i}"), usage=Usage(input=used(i), output=450))
        ends.append(views.closed(s.committed.view, len(s.committed.log)))
    t = transition(s, start(words(100, "q3"), CTX))
    assert isinstance(t.command, Summarize)
    t = transition(t.state, SummaryDone(call_id=t.command.call_id, message=summary_answer("S")))
    assert isinstance(t.command, CallLLM) and t.compacted is not None
    assert second is not None
    return answer(t.state, "fine", usage=Usage(input=900)), ends, second


def test_the_marks_span_the_compaction_epochs() -> None:
    s, ends, _ = compacted()
    c = s.committed
    assert len(c.compactions) == 1 and len(c.turn_starts) == 4
    # The end of each turn is where the next began; the last's is the current view.
    assert turn_ends(c) == (*ends, views.closed(c.view, len(c.log)))
    assert c.turn_starts[0] == TurnStart(view=())


def test_a_rewind_to_a_turn_before_the_compaction_restores_its_epoch_and_extends_its_request() -> (
    None
):
    s, ends, second = compacted()
    c = s.committed
    t = transition(s, Rewind(turns=2))  # the client keeps our first two turns
    back = t.state.committed
    assert views.closed(back.view, len(back.log)) == ends[1]
    assert back.messages == c.log[:4]  # turn 1 and 2, unsummarized
    assert back.fresh_from == 0 and back.turn_starts == c.turn_starts[:2]
    assert back.log == c.log  # nothing deleted
    # The meter describes the restored view: turn 2's call, measured by its provider.
    assert back.meter_basis == MeterBasis(chars=second.prompt, used=used(1))
    # Its window is the one the loop decides by (the turn's budget), not the one passed in.
    assert meter_of_state(back, 10_000) == measure(second.prompt, used=used(1), window=WINDOW.size)
    # The next request extends turn 2's, byte for byte, over the same prompt and tools.
    nxt = transition(t.state, start("again", CTX))
    assert isinstance(nxt.command, CallLLM)
    before = encode_messages(second.request.messages)
    assert encode_messages(nxt.command.request.messages).startswith(before)
    assert nxt.command.request.system_prompt == second.request.system_prompt
    assert nxt.command.request.tools == second.request.tools
    assert nxt.command.prompt.summarized_conversation == 0
    assert len(nxt.state.committed.turn_starts) == 3


def test_a_rewind_into_the_compacted_epoch_keeps_its_summary() -> None:
    s, _, _ = compacted()
    nxt = answer(transition(s, start("five", CTX)).state, "ok")
    t = transition(nxt, Rewind(turns=4))
    back = t.state.committed
    assert back.view == views.reopened(turn_ends(nxt.committed)[3], len(back.log))
    assert back.fresh_from == 2 and back.messages[0] == nxt.committed.messages[0]  # the summary


def test_a_rewind_not_behind_or_while_busy_is_ignored() -> None:
    s, _, _ = compacted()
    for turns in (4, 5):
        assert transition(s, Rewind(turns=turns)).ignored == Ignored.ALREADY_THERE
    busy = transition(s, start("more", CTX)).state
    assert transition(busy, Rewind(turns=1)).ignored == Ignored.BUSY


def test_the_meter_of_a_checkpoint_is_the_last_calls_without_reading_the_history() -> None:
    s, _, _ = compacted()
    c = s.committed
    basis = c.meter_basis
    assert basis is not None and basis.used == 900
    # A basis that disagrees with the messages wins: nothing is recomputed from them.
    odd = replace(c, meter_basis=MeterBasis(chars=PromptChars(tools=4000), used=77))
    assert meter_of_state(odd, 1000) == measure(
        PromptChars(tools=4000), used=77, window=WINDOW.size
    )
    # A state stored before the basis existed is measured from its messages (once).
    legacy = replace(c, meter_basis=None)
    assert meter_of_state(legacy, 1000) == measure(basis.chars, used=900, window=WINDOW.size)
    # A state without a budget shows the window passed in (the model's configured one).
    bare = replace(odd, context=None)
    assert meter_of_state(bare, 1000) == measure(PromptChars(tools=4000), used=77, window=1000)


def test_a_model_call_that_changes_the_history_asks_for_a_checkpoint() -> None:
    s = transition(RuntimeState.new("c"), start("go")).state
    calls = [tool_call("r1"), tool_call("r2")]
    ts, _ = stream(s, FauxResponse.tool_calls(calls))
    done = ts[-1]
    assert isinstance(done.command, CallClients) and len(done.command.calls) == 2
    assert done.checkpoint == Checkpoint(pending_tool_calls=("r1", "r2"))
    # A tool result is no model call: no checkpoint; the answer ends the turn: its own.
    t = transition(done.state, ToolResult(message=result("r1")))
    assert t.checkpoint is None
    t = transition(t.state, ToolResult(message=result("r2")))
    assert t.checkpoint is None and isinstance(t.command, CallLLM)
    ts, _ = stream(t.state, FauxResponse.text("done"))
    assert isinstance(ts[-1].command, Final) and ts[-1].checkpoint is None


def test_a_state_stored_before_the_marks_rebuilds_them_from_the_stores_record() -> None:
    """TurnMarksFound: turn k+1 began where the store says turn k ended; the last end, when it
    is the current view, is the last turn's; an end outside the log stops the list; a state
    with marks, or a busy one, takes none."""
    s, _, _ = compacted()
    c = s.committed
    ends = turn_ends(c)
    legacy = RuntimeState(replace(c, turn_starts=()))
    assert wants_turn_marks(legacy.committed) and not wants_turn_marks(c)
    t = transition(legacy, TurnMarksFound(ends=ends))
    assert isinstance(t.command, WaitInput)
    rebuilt = (TurnStart(view=()), *(TurnStart(view=e) for e in ends[:-1]))
    assert t.state.committed == replace(
        legacy.committed,
        turn_starts=rebuilt,
        commit=c.commit + 1,
        last_commit_id=f"{c.conversation_id}@{c.commit + 1}",
    )
    assert turn_ends(t.state.committed) == ends
    # A rewind to the first turn then works as on a state that kept its marks.
    back = transition(t.state, Rewind(turns=1)).state.committed
    assert back.messages == transition(s, Rewind(turns=1)).state.committed.messages
    # The current view after the last recorded end: a turn of its own.
    t2 = transition(legacy, TurnMarksFound(ends=ends[:-1]))
    assert t2.state.committed.turn_starts == rebuilt
    # An end outside the log, and what follows it, are left out.
    outside = (ends[0], (Span(0, len(c.log) + 5),), ends[1])
    t3 = transition(legacy, TurnMarksFound(ends=outside))
    assert t3.state.committed.turn_starts == (TurnStart(view=()), TurnStart(view=ends[0]))
    # Marks kept already, a busy state, nothing recorded: ignored, nothing changes.
    assert transition(s, TurnMarksFound(ends=ends)).ignored is Ignored.ALREADY_THERE
    busy = transition(legacy, start("more", CTX)).state
    assert transition(busy, TurnMarksFound(ends=ends)).ignored is Ignored.BUSY
    assert transition(legacy, TurnMarksFound(ends=())).ignored is Ignored.NOT_AWAITED
