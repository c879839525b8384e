"""What a run does for the action that started it (`RunRequest.action`), before the loop sees
anything: a turn for the loop, a compaction, a child's cancel, or an empty successful turn for
an action no issue builds (cursor-native-tools.md §3.7).

This is routing, not a decision about the conversation: every variant has one fixed route,
listed here so docs/dialect.md can show the table. Never invalid_argument for a known action.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from ...llm.types import TextContent, UserMessage
from ..cursor import RunAction, RunRequest, ShellCommandRun, UnknownAction

log = logging.getLogger(__name__)


class Route(enum.StrEnum):
    TURN = "turn"  # a user message: the loop starts a turn
    RESUME = "resume"  # the loop continues the conversation's turn
    EMPTY_TURN = "empty turn"  # turn_ended at once; nothing recorded
    NOTE = "note"  # recorded in the history (loop Note), then an empty turn
    COMPACT = "compact"  # the loop compacts the conversation (loop Compact), then the turn ends
    CANCEL_CHILD = "cancel child"  # cancel the named child's run here, then an empty turn


@dataclass(frozen=True, slots=True)
class ActionRoute:
    route: Route


ROUTES: dict[RunAction, ActionRoute] = {
    RunAction.USER_MESSAGE: ActionRoute(Route.TURN),
    RunAction.RESUME: ActionRoute(Route.RESUME),
    # A run request that only cancels: starting it already superseded the conversation's busy
    # run (Runner.claim), which is what the user asked for.
    RunAction.CANCEL: ActionRoute(Route.EMPTY_TURN),
    RunAction.SUMMARIZE: ActionRoute(Route.COMPACT),
    RunAction.SHELL_COMMAND: ActionRoute(Route.NOTE),
    # Plan mode from a message, the Build button, late answers: the dialect made each a turn
    # (a user message, or a Build the loop opens with the plan).
    RunAction.START_PLAN: ActionRoute(Route.TURN),
    RunAction.EXECUTE_PLAN: ActionRoute(Route.TURN),
    RunAction.ASK_QUESTION_COMPLETION: ActionRoute(Route.TURN),
    RunAction.CANCEL_SUBAGENT: ActionRoute(Route.CANCEL_CHILD),
    # The dialect wrote the run's user message: a notice of what the client reported.
    RunAction.BACKGROUND_TASK_COMPLETION: ActionRoute(Route.TURN),
    RunAction.BACKGROUND_SHELL: ActionRoute(Route.TURN),
    # [U] The IDE answers the Task's pending exec with a background reason itself
    # (TaskMachine reads it); the action's own run has nothing more to do.
    RunAction.BACKGROUND_SUBAGENT: ActionRoute(Route.EMPTY_TURN),
    # The dialect wrote the run's user message: the notifications, or the injected message
    # (an injection whose run is gone is read by the model as the next turn [U]).
    RunAction.SUBSCRIPTION_NOTIFICATION: ActionRoute(Route.TURN),
    RunAction.INJECT_CONTEXT: ActionRoute(Route.TURN),
    # Deliberate: a goal loop continues a goal made with Cursor's CreateGoal tool, which this
    # server does not offer, so no conversation of its own has one to continue.
    RunAction.GOAL_CONTINUATION: ActionRoute(Route.EMPTY_TURN),
    # A variant newer than this server's schema: an empty turn, logged once (§6.1).
    RunAction.UNKNOWN: ActionRoute(Route.EMPTY_TURN),
}

# The unknown action variants (their field numbers) already logged by this process.
_UNKNOWN_SEEN: set[tuple[int, ...]] = set()


def log_empty_turn(request: RunRequest, request_id: str) -> None:
    """The log line of a run that ends as an empty turn: INFO, except for a variant this
    server does not know, a WARNING the first time this process sees it."""
    payload = request.payload
    if not isinstance(payload, UnknownAction):
        log.info("run %s: %s ends as an empty turn", request_id, request.action)
        return
    if payload.field_numbers in _UNKNOWN_SEEN:
        log.debug("run %s: the unknown action %s again", request_id, payload.field_numbers)
        return
    _UNKNOWN_SEEN.add(payload.field_numbers)
    fields = ", ".join(str(n) for n in payload.field_numbers) or "none set"
    log.warning(
        "a ConversationAction this server does not know (field %s; a newer IDE?) ended as "
        "an empty turn; later ones are not logged",
        fields,
    )


def shell_command_note(run: ShellCommandRun) -> UserMessage:
    """What the history keeps of a command the user ran from the chat ([U]: the action carries
    no output, so only the command is known)."""
    return UserMessage(
        content=(
            TextContent(
                text=(
                    "(The user ran this command in their terminal, outside this conversation's "
                    f"tools; its output is not known here:)\n```\n{run.command}\n```"
                )
            ),
        )
    )
