"""The published turn ids kept between runs (`turn_ids`, issue 28) are those computed from
nothing, whatever the memo held before (a longer branch, a rewind's cut, views reloaded as
equal copies); and a checkpoint computes the blob of only the turns that changed."""

from __future__ import annotations

import hashlib
from unittest import mock

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.llm.types import UserMessage
from cursor_byok.loop import ConversationState, Span, TurnStart
from cursor_byok.loop import view as views
from cursor_byok.loop.derived import turn_ends
from cursor_byok.transport.cursor import turn_blob
from cursor_byok.transport.runtime import turn_ids as memo_module
from cursor_byok.transport.runtime.turn_ids import (
    TurnEnd,
    TurnIds,
    shared_turns,
    turn_ids,
    turns_of,
)

CID = "conv-1"


def fresh(ends: tuple[TurnEnd, ...]) -> tuple[tuple[bytes, ...], bytes]:
    blobs = [
        turn_blob(CID, k, [(s.start, s.end if s.end is not None else s.start) for s in end])
        for k, end in enumerate(ends, 1)
    ]
    return tuple(hashlib.sha256(b).digest() for b in blobs), (blobs[-1] if blobs else b"")


span_lists = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 8)).map(lambda t: Span(t[0], t[0] + t[1])),
    min_size=1,
    max_size=3,
).map(tuple)
# Each step: keep a prefix of some earlier list of turn ends, add new turns, and maybe copy
# every view (what a state reloaded from the store has: equal values, other objects).
steps = st.lists(
    st.tuples(
        st.integers(0, 9), st.integers(0, 12), st.lists(span_lists, max_size=4), st.booleans()
    ),
    min_size=1,
    max_size=8,
)


def copied(end: TurnEnd) -> TurnEnd:
    return tuple(Span(s.start, s.end) for s in end)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_the_kept_ids_are_the_ids_computed_from_nothing(plan: list) -> None:  # type: ignore[type-arg]
    histories: list[tuple[TurnEnd, ...]] = [()]
    memo: TurnIds | None = None
    for which, keep, more, copy in plan:
        base = histories[which % len(histories)]
        ends = base[: min(keep, len(base))] + tuple(more)
        if copy:
            ends = tuple(copied(e) for e in ends)
        memo = turn_ids((CID,) * len(ends), ends, memo)
        assert (memo.ids, memo.last_blob) == fresh(ends)
        assert memo.ends == ends
        histories.append(ends)


def test_shared_turns_compares_by_value_after_identity() -> None:
    a = tuple((Span(0, k),) for k in range(1, 6))
    assert shared_turns(a, a) == 5
    assert shared_turns(a, tuple(copied(e) for e in a)) == 5
    assert shared_turns(a, (*a[:3], (Span(0, 99),), a[4])) == 3
    assert shared_turns(a, a[:2]) == 2
    assert shared_turns((), a) == 0


def test_a_checkpoint_computes_only_the_turns_that_changed() -> None:
    memo: TurnIds | None = None
    ends: tuple[TurnEnd, ...] = ()
    with mock.patch.object(memo_module, "turn_blob", wraps=turn_blob) as blobs:
        for turn in range(1, 301):
            # the turns so far keep their views; the last one's is recreated each time
            ends = (*ends[:-1], (Span(0, 4 * turn - 4),)) if ends else ()
            ends = (*ends, (Span(0, 4 * turn),))
            memo = turn_ids((CID,) * len(ends), ends, memo)
            memo = turn_ids(
                (CID,) * len(ends), (*ends[:-1], copied(ends[-1])), memo
            )  # mid-turn, then end
    # The first call of a turn computes its previous turn (its end moved) and its own; the
    # second, with an equal last view, none.
    assert blobs.call_count <= 2 * 300
    assert memo is not None and (memo.ids, memo.last_blob) == fresh(ends)


def test_a_turn_made_in_another_conversation_has_that_ones_id() -> None:
    """A fork's first turns keep their source's ids, memo or not; the same view made here
    is another turn."""
    ends = ((Span(0, 4),), (Span(0, 8),))
    forked = turn_ids(("source", CID), ends, None)
    assert forked.ids[0] == hashlib.sha256(turn_blob("source", 1, [(0, 4)])).digest()
    assert forked.ids[1] == hashlib.sha256(turn_blob(CID, 2, [(0, 8)])).digest()
    own = turn_ids((CID, CID), ends, forked)
    assert own.ids[0] == hashlib.sha256(turn_blob(CID, 1, [(0, 4)])).digest()
    assert own.ids[1] == forked.ids[1]


def plain_turns(
    starts: tuple[TurnStart, ...], now: TurnEnd
) -> tuple[tuple[str, ...], tuple[TurnEnd, ...]]:
    """Each turn's conversation and end, walked from the marks alone (derived.turn_ends)."""
    if not starts:
        return (), ()
    made_in = tuple(mark.conversation or CID for mark in starts)
    return made_in, (*(mark.view for mark in starts[1:]), now)


start_st = st.tuples(span_lists, st.booleans()).map(
    lambda t: TurnStart(view=t[0], conversation="source" if t[1] else "")
)
# Each step: keep a prefix of some earlier list of marks, add new ones, maybe copy them all
# (a state reloaded from the store), and the current view.
mark_steps = st.lists(
    st.tuples(
        st.integers(0, 9),
        st.integers(0, 12),
        st.lists(start_st, max_size=3),
        st.booleans(),
        span_lists,
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=300, deadline=None)
@given(mark_steps)
def test_the_turns_read_from_the_memo_are_those_walked_from_the_marks(plan: list) -> None:  # type: ignore[type-arg]
    histories: list[tuple[TurnStart, ...]] = [()]
    memo: TurnIds | None = None
    for which, keep, more, copy, now in plan:
        base = histories[which % len(histories)]
        starts = base[: min(keep, len(base))] + tuple(more)
        if copy:
            starts = tuple(msgspec.structs.replace(m) for m in starts)
        made_in, ends = turns_of(CID, starts, now, memo)
        assert (made_in, ends) == plain_turns(starts, now)
        memo = turn_ids(made_in, ends, memo, starts)
        assert (memo.ids, memo.last_blob) == fresh_made_in(made_in, ends)
        histories.append(starts)


def fresh_made_in(
    made_in: tuple[str, ...], ends: tuple[TurnEnd, ...]
) -> tuple[tuple[bytes, ...], bytes]:
    blobs = [
        turn_blob(c, k, [(s.start, s.end if s.end is not None else s.start) for s in end])
        for k, (c, end) in enumerate(zip(made_in, ends, strict=True), 1)
    ]
    return tuple(hashlib.sha256(b).digest() for b in blobs), (blobs[-1] if blobs else b"")


def test_the_turns_of_marks_the_memo_holds_are_read_from_it() -> None:
    """A turn's checkpoints walk only the marks after those of the memo: the memo's own
    values come back (here marked, to tell them from a walk's)."""
    starts = tuple(TurnStart(view=(Span(0, 4 * k),)) for k in range(1, 5))
    now = (Span(0, 20),)
    made_in, ends = turns_of(CID, starts, now, None)
    assert (made_in, ends) == plain_turns(starts, now)
    memo = turn_ids(made_in, ends, None, starts)
    marked = TurnIds(memo.ends, memo.ids, memo.last_blob, ("memo",) * 4, starts)
    assert turns_of(CID, starts, now, marked)[0] == ("memo",) * 4
    grown = (*starts, TurnStart(view=(Span(0, 24),)))
    made_in, ends = turns_of(CID, grown, (Span(0, 28),), marked)
    assert made_in == ("memo",) * 4 + (CID,)
    assert ends == plain_turns(grown, (Span(0, 28),))[1]
    assert all(a is b for a, b in zip(ends[:3], memo.ends[:3], strict=True))
    # Other marks (a rewind's cut and a new turn): walked afresh.
    other = (*starts[:2], TurnStart(view=(Span(0, 9),)))
    assert turns_of(CID, other, now, marked) == plain_turns(other, now)


def test_turns_of_ends_the_turns_as_the_loop_does() -> None:
    log = tuple(UserMessage.of_text(str(k)) for k in range(7))
    starts = (TurnStart(view=()), TurnStart(view=(Span(0, 3),)), TurnStart(view=(Span(0, 5),)))
    state = msgspec.structs.replace(
        ConversationState.new(CID), turn_starts=starts, log=log, view=(Span(0, 2), Span(4))
    )
    now = views.closed(state.view, len(state.log))
    assert turns_of(CID, starts, now, None)[1] == turn_ends(state)
