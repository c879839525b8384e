"""What the conversation's state implies, derived without deciding anything: the plan a Build
carries out, and the todo list and plan a rewound view restores (also into a compaction's
epoch, whose view starts with the summary). transition.py decides when; these only compute."""

from __future__ import annotations

import msgspec

from . import view
from .inputs import PlanBuild
from .state import CompactionMark, ConversationState, PlanRecord, TurnStart
from .todos import TodoItem
from .todos import replay as replay_todos


def plan_to_build(c: ConversationState, build: PlanBuild) -> PlanRecord:
    """The plan a Build carries out: the IDE's copy when it sent one, else the one the
    conversation's last CreatePlan recorded (the IDE's URI wins, it names the file it has)."""
    recorded = c.plan
    if build.plan.strip():
        # [U] the IDE's copy carries no steps we read: the recorded plan's go with it.
        name = recorded.name if recorded is not None else ""
        todos = recorded.todos if recorded is not None else ()
        return PlanRecord(text=build.plan, uri=build.uri, name=name, todos=todos)
    if recorded is not None:
        return msgspec.structs.replace(recorded, uri=build.uri or recorded.uri)
    return PlanRecord(text="", uri=build.uri)


def epoch_of(c: ConversationState, active: tuple[view.Span, ...]) -> CompactionMark | None:
    """The compaction whose summary opens `active`, or None (a view without a summary)."""
    if not active or not c.compactions:
        return None
    first = active[0]
    for mark in c.compactions:
        if first.start == mark.at:
            return mark
    return None


def fresh_from(c: ConversationState, active: tuple[view.Span, ...]) -> int:
    """Where, in what `active` selects, the history sent after its compaction starts."""
    mark = epoch_of(c, active)
    return 0 if mark is None else 1 + mark.kept


def todos_in_view(c: ConversationState, active: tuple[view.Span, ...]) -> tuple[TodoItem, ...]:
    """The todo list `active` implies: the seed, then the TodoWrite calls it selects from log
    position `todo_from` on (an imported history's own calls are covered by the seed). In a
    compaction's epoch: the list at the compaction, then the calls after its kept tail."""
    mark = epoch_of(c, active)
    if mark is not None:
        after = view.suffix(active, len(c.log), 1 + mark.kept)
        return _replay_from_resets(c, mark.todos, after)
    if c.todo_from:
        active = tuple(
            view.Span(max(s.start, c.todo_from), s.end)
            for s in active
            if s.end is None or s.end > c.todo_from
        )
    return _replay_from_resets(c, c.todo_seed, active)


def _replay_from_resets(
    c: ConversationState, seed: tuple[TodoItem, ...], active: tuple[view.Span, ...]
) -> tuple[TodoItem, ...]:
    """`seed` and the TodoWrite calls `active` selects, starting over at the last Build in it
    that set the list to its plan's steps."""
    if not c.todo_resets:
        return replay_todos(seed, view.materialize(active, c.log))
    positions = view.materialize(active, tuple(range(len(c.log))))
    resets = {r.at: r.todos for r in c.todo_resets}
    start = 0
    for i, at in enumerate(positions):
        if at in resets:
            seed, start = resets[at], i + 1
    return replay_todos(seed, tuple(c.log[p] for p in positions[start:]))


def plan_in_view(c: ConversationState, active: tuple[view.Span, ...]) -> PlanRecord | None:
    """The plan `active` implies: the one saved at the last log position it selects, in view
    order; None when it selects none. A state stored before plans were marked keeps its plan."""
    epoch = epoch_of(c, active)
    if epoch is not None:
        active = view.suffix(active, len(c.log), 1 + epoch.kept)
    if not c.plans:
        return c.plan
    found: PlanRecord | None = epoch.plan if epoch is not None else None
    for span in active:
        end = len(c.log) if span.end is None else span.end
        for mark in c.plans:
            if span.start <= mark.at < end:
                found = mark.plan
    return found


def plans_in_view(c: ConversationState, active: tuple[view.Span, ...]) -> tuple[PlanRecord, ...]:
    """Every plan `active` selects, in view order (a later revision after an earlier one); a
    state stored before plans were marked gives its one plan."""
    if not c.plans:
        return (c.plan,) if c.plan is not None else ()
    found: list[PlanRecord] = []
    for span in active:
        end = len(c.log) if span.end is None else span.end
        found.extend(mark.plan for mark in c.plans if span.start <= mark.at < end)
    return tuple(found)


def turn_ends(c: ConversationState) -> tuple[tuple[view.Span, ...], ...]:
    """The closed view at the end of each turn of the active branch, oldest first: where the
    next turn began, and the current view for the last (the turn in progress, or just ended).
    What the client's checkpoint lists, one blob per turn, across compaction epochs."""
    starts = c.turn_starts
    if not starts:
        return ()
    ends = [s.view for s in starts[1:]]
    ends.append(view.closed(c.view, len(c.log)))
    return tuple(ends)


def opened(c: ConversationState) -> ConversationState:
    """`c` with a turn mark for a turn that begins now, from the history as it stands
    (uncommitted; called before the turn appends its first message)."""
    mark = TurnStart(view=view.closed(c.view, len(c.log)))
    return msgspec.structs.replace(c, turn_starts=(*c.turn_starts, mark))
