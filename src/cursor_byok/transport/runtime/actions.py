"""What a run does for the action that started it (`RunRequest.action`), before the loop sees
anything: a turn for the loop, a compaction, a child's cancel, or an empty successful turn for
an action no issue builds (cursor-native-tools.md §3.7).

This is routing, not a decision about the conversation: every variant has one fixed route,
listed here so docs/dialect.md can show the table. Never invalid_argument for a known action.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ...llm.types import TextContent, UserMessage
from ..cursor import RunAction, ShellCommandRun


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
    RunAction.SUBSCRIPTION_NOTIFICATION: ActionRoute(Route.EMPTY_TURN),
    RunAction.GOAL_CONTINUATION: ActionRoute(Route.EMPTY_TURN),
    RunAction.INJECT_CONTEXT: ActionRoute(Route.EMPTY_TURN),
}


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
