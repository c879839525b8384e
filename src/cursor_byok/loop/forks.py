"""A chat forked from a conversation of this server: the state the new conversation opens with.

The fork gets its own copy of the source's log up to the fork point, with the source's turn
marks, compaction epochs, plans and todo resets that lie in it, and the source's view at the
fork point as its active history. Its first turns are the source's (each mark names the
source, `TurnStart.conversation`), so the fork's checkpoint lists the source's own turn blobs
first, as the client holds them, then the fork's turns; a rewind inside the fork to any of
them, before the fork point or before a compaction, restores that turn's view like a rewind in
the source would (recovery.on_rewind). Nothing is shared mutable: the log is an immutable tuple of
immutable messages, stored again as the fork's own rows.
"""

from __future__ import annotations

import msgspec

from . import derived, view
from .inputs import ForkOf
from .state import ConversationState, TurnStart
from .view import Span

_replace = msgspec.structs.replace


def _point(fork: ForkOf) -> tuple[tuple[Span, ...], tuple[TurnStart, ...]]:
    """The source's view at the fork point and the turn marks that lead to it."""
    s = fork.source
    latest = view.closed(s.view, len(s.log))
    if fork.turns == 0:
        return latest, s.turn_starts
    ends = derived.turn_ends(s)
    if fork.turns <= len(ends) and ends[fork.turns - 1] == (fork.view or ends[fork.turns - 1]):
        return ends[fork.turns - 1], s.turn_starts[: fork.turns]
    if fork.view and view.problem(fork.view, len(s.log)) is None:
        # The source's marks no longer lead there (a state stored before them): its history
        # at that turn, without the earlier turns to rewind to.
        return fork.view, ()
    return latest, s.turn_starts


def forked(c: ConversationState, fork: ForkOf) -> ConversationState:
    """`c` (a conversation with no log yet) opened as a fork of `fork.source` (uncommitted)."""
    s = fork.source
    target, marks = _point(fork)
    origin = s.conversation_id
    marks = tuple(m if m.conversation else _replace(m, conversation=origin) for m in marks)
    end = max((span.end or 0 for span in target), default=0)
    log = s.log[:end]
    active = view.reopened(target, end)
    c2 = _replace(
        c,
        log=log,
        view=active,
        messages=view.materialize(active, log),
        turn_starts=marks,
        compactions=tuple(m for m in s.compactions if m.at < end),
        plans=tuple(p for p in s.plans if p.at < end),
        todo_resets=tuple(r for r in s.todo_resets if r.at < end),
        todo_seed=s.todo_seed,
        todo_from=min(s.todo_from, end),
    )
    return _replace(
        c2,
        todos=derived.todos_in_view(c2, active),
        plan=derived.plan_in_view(c2, active),
        fresh_from=derived.fresh_from(c2, active),
    )
