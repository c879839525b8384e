"""A fork of one of our conversations (loop/forks.py): the new conversation opens with a copy
of the source's log up to the fork point, the source's turn marks naming the source, and the
source's view at the fork point."""

from __future__ import annotations

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.loop import (
    CallLLM,
    ConversationState,
    Final,
    ForkOf,
    Rewind,
    RuntimeState,
    Span,
    Start,
    TurnStart,
    transition,
)
from cursor_byok.loop.derived import turn_ends

from .loop_helpers import start, stream, user


def two_turns(cid: str = "source") -> ConversationState:
    state = RuntimeState.new(cid)
    for text in ("one", "two"):
        t = transition(state, start(text))
        transitions, _ = stream(t.state, FauxResponse.text(f"answer {text}"))
        assert isinstance(transitions[-1].command, Final)
        state = transitions[-1].state
    return state.committed


def test_a_fork_at_an_earlier_turn_holds_the_sources_turns_up_to_it() -> None:
    source = two_turns()
    end_one = turn_ends(source)[0]
    t = transition(
        RuntimeState.new("fork"),
        Start(user_message=user("forked"), fork=ForkOf(source=source, turns=1, view=end_one)),
    )
    assert isinstance(t.command, CallLLM)
    c = t.state.committed
    assert c.log == (*source.log[:2], user("forked"))
    assert c.messages == c.log
    assert c.turn_starts == (
        TurnStart(view=(), conversation="source"),
        TurnStart(view=end_one),
    )
    assert t.appended == c.log  # the fork's own rows
    # Its turn list: the source's turn 1, then its own; a rewind to turn 1 restores it.
    assert turn_ends(c)[0] == turn_ends(source)[0]
    done, _ = stream(t.state, FauxResponse.text("ok"))
    rewound = transition(done[-1].state, Rewind(turns=1)).state.committed
    assert rewound.messages == source.log[:2]
    assert rewound.turn_starts == c.turn_starts[:1]


def test_a_fork_at_the_latest_state_or_with_marks_that_do_not_lead_there() -> None:
    source = two_turns()
    latest = transition(RuntimeState.new("f1"), Start(user_message=user("x"), fork=ForkOf(source)))
    c = latest.state.committed
    assert c.log == (*source.log, user("x"))
    assert [m.conversation for m in c.turn_starts] == ["source", "source", ""]
    # A view the source's marks do not end on (a state stored before them): that history,
    # without the source's turns.
    odd = ForkOf(source=source, turns=1, view=(Span(0, 1),))
    t = transition(RuntimeState.new("f2"), Start(user_message=user("y"), fork=odd))
    c2 = t.state.committed
    assert c2.log == (source.log[0], user("y"))
    assert c2.turn_starts == (TurnStart(view=(Span(0, 1),)),)
    # A fork's Start on a conversation that has a log already is an ordinary Start.
    again = transition(t.state, Start(user_message=user("z"), fork=ForkOf(source)))
    assert again.state.committed.log == (*c2.log, user("z"))
