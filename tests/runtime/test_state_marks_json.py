"""The committed state's bytes splice in the JSON kept for its turn marks (`encode_state`,
issue 28): they are the bytes of the state encoded whole, whatever the memo held before (the
same marks, a longer branch, a rewind's cut, equal copies, another conversation's), and a turn
that appends one mark encodes that mark alone."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.loop import ConversationState, Span, TurnStart
from cursor_byok.transport.runtime import records


def whole(state: ConversationState) -> bytes:
    """The state encoded as it was before the marks' JSON was kept."""
    plain = msgspec.structs.replace(state, messages=(), log=())
    return msgspec.json.encode(plain, order="deterministic")


def state_of(cid: str, marks: tuple[TurnStart, ...], turn: int = 0) -> ConversationState:
    return msgspec.structs.replace(ConversationState.new(cid), turn_starts=marks, turn=turn)


def mark(k: int, other: bool = False) -> TurnStart:
    return TurnStart(view=(Span(0, 4 * k),), conversation="source" if other else "")


@pytest.fixture(autouse=True)
def _empty_memo() -> None:
    records._encoded_marks.clear()


marks_st = st.lists(
    st.tuples(st.integers(0, 30), st.booleans()).map(lambda t: mark(*t)), max_size=5
).map(tuple)
# Each step: a conversation, a prefix of its previous marks (or an equal copy of them), and
# the marks appended after it.
steps = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 6), st.booleans(), marks_st),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_state_bytes_are_those_of_the_state_encoded_whole(
    plan: list[tuple[str, int, bool, tuple[TurnStart, ...]]],
) -> None:
    records._encoded_marks.clear()
    current: dict[str, tuple[TurnStart, ...]] = {"a": (), "b": ()}
    for k, (cid, keep, copy, added) in enumerate(plan):
        kept = current[cid][:keep] if keep < len(current[cid]) else current[cid]
        if copy:
            kept = tuple(msgspec.structs.replace(m) for m in kept)
        marks = (*kept, *added) if added else kept
        current[cid] = marks
        state = state_of(cid, marks, turn=k)
        assert records.encode_state(state) == whole(state)
        assert records.encode_state(state) == whole(state)  # the same marks again


def test_a_turn_encodes_its_new_mark_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[int] = []
    real = records._encode_marks

    def counting(marks: tuple[TurnStart, ...]) -> bytes:
        encoded.append(len(marks))
        return real(marks)

    monkeypatch.setattr(records, "_encode_marks", counting)
    marks: tuple[TurnStart, ...] = ()
    for k in range(1, 6):
        marks = (*marks, mark(k))
        for commit in range(3):  # a turn commits its state several times
            state = state_of("a", marks, turn=commit)
            assert records.encode_state(state) == whole(state)
    assert encoded == [1, 1, 1, 1, 1]
    # A rewind's cut, then a turn: the cut marks encoded whole, the next one alone.
    cut = marks[:2]
    assert records.encode_state(state_of("a", cut)) == whole(state_of("a", cut))
    grown = (*cut, mark(9))
    assert records.encode_state(state_of("a", grown)) == whole(state_of("a", grown))
    assert encoded == [1, 1, 1, 1, 1, 2, 1]


def test_a_state_without_marks_omits_them() -> None:
    state = state_of("a", ())
    assert b"turn_starts" not in records.encode_state(state)
    assert records.encode_state(state) == whole(state)
