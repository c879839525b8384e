"""Subagents as loop rules (docs/subagents.md): where a run sits among its parents, what a
helper's report adds to its parent's message, and what a Task call asks of the runtime.

The runtime reports facts: whether a run request is a child run's, which Task call of this
process it was matched to, the helpers' final messages it read from the store. These rules
decide what follows from them: the run's mode and depth, whether Task is still offered, the
text the parent's model reads, which client calls start a child run, and whose progress card is
shown in a parent's Task card.
"""

from __future__ import annotations

import msgspec

from cursor_byok.llm.types import UserMessage

from .context import Subagents, TurnContext
from .inputs import Helper, HelperReport, Start
from .state import ConversationState

_replace = msgspec.structs.replace


def placed(context: TurnContext, stored: TurnContext | None, helper: Helper) -> TurnContext:
    """`context` (with this request's Task model choices) placed among subagents: a new child
    takes its place from its parent's call, a known one keeps its stored place, and a child
    whose parent is not known here sits at depth 1 at least; a child's mode is `subagent`; at
    `max_depth` Task is no longer offered."""
    where = stored.subagents if stored is not None else Subagents()
    mode = "subagent" if where.depth > 0 else context.mode  # a known child stays one
    if helper.child:
        mode = "subagent"
        parent = helper.parent
        if parent is not None:
            where = Subagents(
                depth=parent.depth + 1,
                subagent_type=helper.subagent_type,
                parent_conversation_id=parent.parent_conversation_id,
                root_conversation_id=parent.root_conversation_id,
            )
        elif not where.parent_conversation_id:
            where = Subagents(depth=max(1, where.depth), subagent_type=helper.subagent_type)
    choices = context.subagents
    subagents = _replace(
        where, models=choices.models, overrides=choices.overrides, custom=choices.custom
    )
    reached = True if subagents.depth >= helper.max_depth else None
    switches = _replace(context.switches, subagent_depth_reached=reached)
    return _replace(context, mode=mode, subagents=subagents, switches=switches)


def kept_place(context: TurnContext, stored: TurnContext) -> TurnContext:
    """A follow-up's context keeps the turn's place among subagents and its depth gate (the
    custom agents its own context names)."""
    reached = stored.switches.subagent_depth_reached
    subagents = _replace(stored.subagents, custom=context.subagents.custom)
    if context.subagents == subagents and context.switches.subagent_depth_reached == reached:
        return context
    switches = _replace(context.switches, subagent_depth_reached=reached)
    return _replace(context, subagents=subagents, switches=switches)


def with_reports(message: UserMessage, reports: tuple[HelperReport, ...]) -> UserMessage:
    """A background completion's notice with each finished helper's final message (the IDE's
    completion only names the helper)."""
    lines = [f"Final message of helper {r.conversation_id}:\n{r.text}" for r in reports if r.text]
    if not lines:
        return message
    return UserMessage.of_text("\n\n".join([message.text, *lines]))


def start_context(start: Start, state: ConversationState) -> TurnContext:
    """The context a Start's turn runs with: its own, placed among subagents."""
    if start.helper is None:
        return start.context
    return placed(start.context, state.context, start.helper)
