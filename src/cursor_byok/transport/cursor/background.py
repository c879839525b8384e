"""The IDE's background actions as the message that starts their run.

`background_task_completion_action` (12) says background shells (or subagents) finished;
`background_shell_action` (13) says the user moved a running Shell to the background. Neither
carries a user message, but each starts a run whose model must learn what happened: the run
gets a user message written here from the action's fields, deterministic (it becomes part of
the cached prefix of later requests). The texts say it is a notice from the client, not
something the user typed.
"""

from __future__ import annotations

from ...llm.types import UserMessage
from .proto import agent_pb2

__all__ = ["background_shell_notice", "completion_notice"]

_KIND = {
    agent_pb2.BACKGROUND_TASK_KIND_SHELL: "Background shell",
    agent_pb2.BACKGROUND_TASK_KIND_SUBAGENT: "Background subagent",
}
_STATUS = {
    agent_pb2.BACKGROUND_TASK_STATUS_SUCCESS: "finished successfully",
    agent_pb2.BACKGROUND_TASK_STATUS_ERROR: "finished with an error",
    agent_pb2.BACKGROUND_TASK_STATUS_ABORTED: "was aborted",
}


def _completion_line(c: agent_pb2.BackgroundTaskCompletion) -> str:
    kind = _KIND.get(c.kind, "Background task")
    progress = c.reason == agent_pb2.BACKGROUND_TASK_COMPLETION_REASON_TASK_PROGRESS
    status = "reported new output" if progress else _STATUS.get(c.status, "finished")
    head = f"- {kind} {c.task_id or '(no id)'}"
    if c.title:
        head += f" ({c.title})"
    parts = [f"{head} {status}."]
    if c.HasField("tool_call_id") and c.tool_call_id:
        parts.append(f"  Started by tool call {c.tool_call_id}.")
    if c.HasField("output_path") and c.output_path:
        parts.append(f"  Its output is in {c.output_path}.")
    if c.HasField("detail") and c.detail:
        parts.append(f"  Detail: {c.detail}")
    return "\n".join(parts)


def completion_notice(action: agent_pb2.BackgroundTaskCompletionAction) -> UserMessage:
    lines = ["[Notice from the client, not typed by the user: background work changed.]"]
    lines.extend(_completion_line(c) for c in action.completions)
    if not action.completions:
        lines.append("- (the client listed no tasks)")
    shells = [
        c.task_id
        for c in action.completions
        if c.kind == agent_pb2.BACKGROUND_TASK_KIND_SHELL and c.task_id.isdigit()
    ]
    if shells:
        lines.append(
            "Use AwaitShell (block_until_ms 0) on "
            + ", ".join(f'shell_id "{s}"' for s in shells)
            + " to read the final output, then carry on with the task."
        )
    else:
        lines.append("Carry on with the task, taking this into account.")
    return UserMessage.of_text("\n".join(lines))


def background_shell_notice(action: agent_pb2.BackgroundShellAction) -> UserMessage:
    call = action.tool_call_id or "(no id)"
    return UserMessage.of_text(
        "[Notice from the client, not typed by the user: the user moved the command of Shell "
        f"call {call} to the background.] It keeps running; its Shell result names its shell "
        "id and terminal file. Use AwaitShell to check on it when its output matters, and "
        "carry on with the task meanwhile."
    )
