"""Each published turn's blob id, kept between runs of a conversation.

A checkpoint lists one blob id per turn of the active branch (checkpoints.py): the SHA-256 of
a small blob naming the turn's closed view, so a function of that view. Computed afresh for
every turn at every checkpoint, a conversation of 450 turns spent about 3 ms of each turn
(three checkpoints, 1,350 blobs encoded and hashed) on ids that had not changed. The memo keeps
the views and ids of the last checkpoint; the next one reuses the ids of the turns whose view
is the same object or an equal one (a state kept between turns shares its turn marks' views;
one reloaded from the store has equal ones), and computes the rest: the last turn's, and all
after a rewind's cut.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Sequence
from dataclasses import dataclass

from ...loop import Span, TurnStart
from ..cursor import turn_blob

TurnEnd = tuple[Span, ...]


@dataclass(frozen=True, slots=True)
class TurnIds:
    """The turns of one checkpoint: each one's closed end view and blob id, and the last one's
    blob (b"" with no turns)."""

    ends: tuple[TurnEnd, ...]
    ids: tuple[bytes, ...]
    last_blob: bytes
    # The conversation each turn was made in (a fork's first turns: its source's).
    made_in: tuple[str, ...] = ()
    # The turn marks `made_in` and all but the last of `ends` were read from (turns_of).
    starts: tuple[TurnStart, ...] = ()


EMPTY = TurnIds((), (), b"")


def shared_turns(old: Sequence[TurnEnd], new: Sequence[TurnEnd]) -> int:
    """How many leading turns end with the same view in `old` and `new`. The views of all but
    the last turn are normally the very objects (checked in C); any other is compared by
    value."""
    n = min(len(old), len(new))
    start = 0
    if n > 1 and all(map(operator.is_, old[: n - 1], new[: n - 1])):
        start = n - 1
    for k in range(start, n):
        if old[k] is not new[k] and old[k] != new[k]:
            return k
    return n


def _blob(conversation_id: str, turn: int, end: TurnEnd) -> bytes:
    spans = [(s.start, s.end if s.end is not None else s.start) for s in end]
    return turn_blob(conversation_id, turn, spans)


def _same_places(old: Sequence[str], new: Sequence[str], kept: int) -> int:
    """`kept` cut at the first turn made in another conversation in `old` than in `new`."""
    n = min(kept, len(old), len(new))
    if old[:n] == new[:n]:  # the usual case, compared in C
        return n
    for k in range(n):
        if old[k] != new[k]:
            return k
    return n


def turns_of(
    conversation_id: str, starts: tuple[TurnStart, ...], now: TurnEnd, memo: TurnIds | None
) -> tuple[tuple[str, ...], tuple[TurnEnd, ...]]:
    """The conversation each turn of the marks `starts` was made in, and each turn's end: the
    next turn's start, `now` (the current closed view) for the last (derived.turn_ends).
    Read from `memo` for the marks it was made from, when `starts` are those very marks or
    begin with them (an identity scan, in C): only the marks after them are walked."""
    if not starts:
        return (), ()
    kept = memo.starts if memo is not None else ()
    n = len(kept)
    if (
        memo is None
        or not n
        or n > len(starts)
        or (kept is not starts and not all(map(operator.is_, kept, starts)))
    ):
        n = 0
        made_in: tuple[str, ...] = ()
        inner: tuple[TurnEnd, ...] = ()
    else:
        made_in, inner = memo.made_in, memo.ends[: n - 1]
    if n < len(starts):
        added = starts[n:]
        made_in += tuple(mark.conversation or conversation_id for mark in added)
        inner += tuple(mark.view for mark in (added[1:] if n == 0 else added))
    return made_in, (*inner, now)


def turn_ids(
    made_in: tuple[str, ...],
    ends: tuple[TurnEnd, ...],
    memo: TurnIds | None,
    starts: tuple[TurnStart, ...] = (),
) -> TurnIds:
    """The ids of the turns ending with `ends` (oldest first), each made in the conversation
    `made_in` names at its index, reusing `memo`'s for the turns it has with the same views
    made in the same conversation."""
    memo = memo or EMPTY
    kept = _same_places(memo.made_in, made_in, shared_turns(memo.ends, ends))
    n = len(ends)
    if kept == n == len(memo.ends):
        if memo.ends is ends and memo.made_in == made_in and memo.starts is starts:
            return memo
        return TurnIds(ends, memo.ids, memo.last_blob, made_in, starts)
    ids = list(memo.ids[:kept])
    blob = b""
    for k in range(kept, n):
        blob = _blob(made_in[k], k + 1, ends[k])
        ids.append(hashlib.sha256(blob).digest())
    if n and kept == n:  # a rewind's cut at a turn end: its blob is not kept
        blob = _blob(made_in[n - 1], n, ends[-1])
    return TurnIds(ends, tuple(ids), blob, made_in, starts)
