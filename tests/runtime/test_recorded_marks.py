"""The turn marks a turn's end records (`Checkpoints._marks_write`, issue 28): the entries of
the kept marks are taken from the previous turn's record, only the new marks' are made, and
the record is the one made from every mark, whatever came before (a turn, a turn that only
moved its end, a rewind's cut)."""

from __future__ import annotations

from typing import Any

from cursor_byok.loop import Span
from cursor_byok.transport.runtime.checkpoints import Checkpoints
from cursor_byok.transport.runtime.committed_states import CommittedStates
from cursor_byok.transport.runtime.turn_ids import TurnEnd, TurnIds, turn_ids

CID = "conv-1"


def checkpoints() -> Checkpoints:
    none: Any = None
    return Checkpoints(
        conversation_id=CID,
        store=none,
        states=CommittedStates(),
        requests=none,
        channel=none,
        background=lambda *_: None,
        window=0,
    )


def test_each_turn_end_records_every_mark_as_made_from_all() -> None:
    cp = checkpoints()
    cp.new_conversation()
    memo: TurnIds | None = None
    ends: tuple[TurnEnd, ...] = ()
    plan = [*range(1, 8), 7, 3, *range(4, 7)]  # turns, a turn's end again, a cut, turns
    for version, turns in enumerate(plan, 1):
        if turns <= len(ends):
            ends = (*ends[: turns - 1], (Span(0, 100 + turns),))  # the cut turn ends elsewhere
        else:
            ends = (*ends, (Span(0, 4 * turns),))
        memo = turn_ids((CID,) * len(ends), ends, memo)
        saved = list(cp._saved or [])
        write = cp._marks_write(saved, list(memo.ids), ends)
        if write is None:
            continue
        assert write.recorded == {
            m.turn: (end, m.blob_id) for m, end in zip(write.marks, ends, strict=True)
        }
        cp._remember(write, version)
    assert cp._recorded is not None and len(cp._recorded) == 6
