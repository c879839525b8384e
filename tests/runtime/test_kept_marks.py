"""The turn marks kept at the end of a turn (checkpoints.kept_marks): those on the branch of
the current view; the common case (the turn extends the last one) decodes one view, not one
per turn (issue 28: O(turns) every turn)."""

from __future__ import annotations

from unittest import mock

from cursor_byok.loop import Span
from cursor_byok.store.api import TurnMark
from cursor_byok.transport.runtime import checkpoints, records


def mark(turn: int, *spans: Span) -> TurnMark:
    return TurnMark(
        conversation_id="c",
        turn=turn,
        blob_id=turn.to_bytes(32, "big"),
        message_count=sum((s.end or 0) - s.start for s in spans),
        view=records.encode_view(spans),
    )


def chain(turns: int) -> list[TurnMark]:
    return [mark(t, Span(0, 2 * t)) for t in range(1, turns + 1)]


def test_a_turn_on_the_same_branch_keeps_every_mark_decoding_only_the_last() -> None:
    marks = chain(300)
    current = (Span(0, 602),)
    with mock.patch.object(records, "decode_view", wraps=records.decode_view) as decode:
        kept = checkpoints.kept_marks(marks, current)
    assert kept == marks and kept is not marks
    assert decode.call_count == 1


def test_after_a_rewind_only_the_marks_on_the_new_branch_are_kept() -> None:
    marks = chain(10)
    # rewound to turn 4 (8 messages), then a new turn appended at log positions 20..22
    current = (Span(0, 8), Span(20, 22))
    kept = checkpoints.kept_marks(marks, current)
    assert [m.turn for m in kept] == [1, 2, 3, 4]
    assert checkpoints.kept_marks([], current) == []


def test_the_fast_path_keeps_what_checking_each_mark_keeps() -> None:
    marks = chain(6)
    for current in [(Span(0, 12),), (Span(0, 13),), (Span(0, 5), Span(12, 14)), (Span(3, 9),)]:
        each = [
            m
            for m in marks
            if checkpoints.views.is_prefix(records.decode_view(m.view, m.message_count), current)
        ]
        assert checkpoints.kept_marks(marks, current) == each, current
