"""Committed conversation states kept in memory between turns.

A turn used to start by loading the conversation and decoding every stored message: about
1.4 ms on the event loop for 240 messages, growing with the history. A run that commits knows
the state it committed and the version the store gave it, so the next turn of the same
conversation can take that state after one point read (`Store.head`) shows the store still
holds exactly that version. Any other writer (another process on the same database, a rewind)
moves the version, and the turn loads from the store as before: the store stays the source of
truth, this is only a copy known to equal it.

The conversation's turn marks (the turns published in client checkpoints) ride along: they
are read at the start and at the end of every turn, and a conversation of a few hundred turns
has as many. A process publishes marks only for a turn it committed, so marks kept with the
state of a version are still the stored ones while the store is at that version. So does the
memo of each turn's blob id (turn_ids.py): a function of the turn's view, checked
against the view on every use, so it holds for any version (a run recomputed every earlier
turn's blob and SHA-256 at each checkpoint: 3 ms a turn at 1,800 messages).

Bounded by what it holds, least recently used first, each entry counted at what it costs in
memory, not at its stored size: the decoded messages are more than their canonical bytes, and
every state has kilobytes of objects of its own (turn context, environment), which dominate
for a conversation of one turn. Counted at the stored bytes alone (about 270 B for such a
conversation), a soak of new conversations grew RSS by 2.8 KB per turn (11 MB/min at 65
turns/s) while the gauge moved 1 MB/min, and a 64 MiB cap would have let about 600 MB in.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import msgspec

from cursor_byok.loop.state import ConversationState
from cursor_byok.store.api import ConversationSummary, TurnMark

from .turn_ids import TurnIds

MAX_BYTES = 64 * 1024 * 1024
# The memory of an entry: ENTRY_COST (the state's own objects: about 1.2 KB freed by dropping
# a one-turn conversation's entry, tests/runtime/test_committed_states_cost.py, and 2.8 KB of
# RSS per turn in bench/soak.py), plus 1.5 times its stored bytes (decoded messages take about
# 1.2 times theirs: docs/store.md, "Committed states kept between turns").
ENTRY_COST = 2560


def memory_cost(stored: int) -> int:
    return ENTRY_COST + stored * 3 // 2


class _Entry(msgspec.Struct):
    version: int
    state: ConversationState
    size: int
    marks: tuple[TurnMark, ...] | None = None  # None: not known here
    # marks' turn -> (decoded view, blob id), the same marks decoded (None: not made here)
    recorded: dict[int, Any] | None = None
    turn_ids: TurnIds | None = None  # checked against the state's turns on use


class CommittedStates:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self.hits = 0  # turns that took a kept state
        self.misses = 0  # turns of a stored conversation that had to load it

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        return self._bytes

    def get(
        self, conversation_id: str, head: ConversationSummary
    ) -> tuple[ConversationState, int] | None:
        """The kept state and its version, if the store's `head` says it is still the
        committed one."""
        entry = self._entries.get(conversation_id)
        if entry is None:
            self.misses += 1
            return None
        if entry.version != head.version or len(entry.state.log) != head.message_count:
            self.forget(conversation_id)
            self.misses += 1
            return None
        self._entries.move_to_end(conversation_id)
        self.hits += 1
        return entry.state, entry.version

    def remember(
        self, conversation_id: str, version: int, state: ConversationState, size: int
    ) -> None:
        """`state` is what the store holds at `version`; `size` its stored bytes (the entry
        is counted at `memory_cost(size)`)."""
        self.forget(conversation_id)
        entry = _Entry(version=version, state=state, size=size)
        self._entries[conversation_id] = entry
        self._bytes += memory_cost(size)
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= memory_cost(dropped.size)

    def advance(
        self,
        conversation_id: str,
        from_version: int,
        to_version: int,
        state: ConversationState,
        added: int,
    ) -> None:
        """A commit moved the conversation from `from_version` to `to_version` (`state`),
        adding `added` stored bytes. Without an entry for `from_version` the size of what
        the store holds is unknown here, so nothing is kept."""
        entry = self._entries.get(conversation_id)
        if entry is None or entry.version != from_version:
            self.forget(conversation_id)
            return
        self.remember(conversation_id, to_version, state, entry.size + added)
        kept = self._entries[conversation_id]
        kept.marks, kept.turn_ids, kept.recorded = entry.marks, entry.turn_ids, entry.recorded

    def turn_marks(self, conversation_id: str, version: int) -> list[TurnMark] | None:
        """The turn marks kept for the conversation at `version`, if known."""
        entry = self._entries.get(conversation_id)
        if entry is None or entry.version != version or entry.marks is None:
            return None
        return list(entry.marks)

    def set_turn_marks(
        self,
        conversation_id: str,
        version: int,
        marks: list[TurnMark] | tuple[TurnMark, ...],
        recorded: dict[int, Any] | None = None,
    ) -> None:
        """`marks` are the conversation's stored (or being stored) marks at `version`;
        `recorded`, when given, those marks decoded (never changed afterwards): the next run
        takes it instead of decoding every mark again (issue 28, long sessions)."""
        entry = self._entries.get(conversation_id)
        if entry is not None and entry.version == version:
            entry.marks = tuple(marks)
            entry.recorded = recorded

    def recorded(self, conversation_id: str, version: int) -> dict[int, Any] | None:
        """The decoded marks kept with the marks at `version` (None: not known here)."""
        entry = self._entries.get(conversation_id)
        if entry is None or entry.version != version or entry.marks is None:
            return None
        return entry.recorded

    def turn_ids(self, conversation_id: str) -> TurnIds | None:
        """The conversation's memo of published turn ids (None: none here). Whoever uses it
        checks it against the state's turns: it is not tied to a version."""
        entry = self._entries.get(conversation_id)
        return None if entry is None else entry.turn_ids

    def set_turn_ids(self, conversation_id: str, memo: TurnIds) -> None:
        entry = self._entries.get(conversation_id)
        if entry is not None:
            entry.turn_ids = memo

    def forget(self, conversation_id: str) -> None:
        entry = self._entries.pop(conversation_id, None)
        if entry is not None:
            self._bytes -= memory_cost(entry.size)
