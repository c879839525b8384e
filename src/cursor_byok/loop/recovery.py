"""A run that stops or picks up again: cancel and supersede, a client gone for good, a run
suspended without deciding its turn, resume from the committed state, and the client's rewind
to an earlier turn."""

from __future__ import annotations

from typing import assert_never

import msgspec

from cursor_byok.llm.types import AssistantMessage

from . import derived, view
from .commands import (
    WAIT_INPUT,
    Canceled,
    Command,
    Failed,
    FailureKind,
    Final,
    FindHelper,
    ResendLLM,
)
from .inputs import HelperFound, LostCause, Resume, Rewind, SuspendCause, ToolLost, ToolResult
from .model_calls import model_of, summarize_command
from .results import CALL_MOVED, CALL_SHUTDOWN, loop_failure
from .state import AwaitClient, AwaitLLM, AwaitSummary, RuntimeState, Status
from .step import (
    CallEnd,
    CallOutcome,
    Ignored,
    LoopError,
    Transition,
    commit,
    ignore,
    settle,
)
from .tool_phase import call_client, on_tool_lost, on_tool_result
from .tools_agent import TASK
from .turns import close_turn

_replace = msgspec.structs.replace

CONTINUED_ELSEWHERE = "the conversation was continued by another request"


def on_cancel(state: RuntimeState, reason: str, *, cards: bool, call_reason: str) -> Transition:
    """Ends in Canceled from every status; the pending response is discarded and the queue
    dropped. A newer run request for the conversation (Supersede) ends the run the same way:
    the new run then starts from the committed state; so does a client whose stream is gone
    for good (ClientGone). A call in flight ends with `call_reason` as its record's reason."""
    c = state.committed
    command = Canceled(reason=reason)
    if c.status == Status.CANCELED and state.pending_response is None:
        return Transition(state, (), command)
    closed, local, call_end = close_turn(c, call_reason)
    c2 = commit(closed, status=Status.CANCELED, waiting=None, queued=(), queued_context=None)
    return settle(c2, (), command, local=local if cards else (), call_end=call_end)


def on_suspend(state: RuntimeState, cause: SuspendCause) -> Transition:
    """The run stops without deciding the turn: nothing is committed (a reopened run resumes
    it from the committed state, an interrupted call sent again from its stored bytes); the
    model or summary call in flight ends, canceled with `cause` as its reason."""
    match cause:
        case SuspendCause.SHUTDOWN:
            reason = CALL_SHUTDOWN
        case SuspendCause.MOVED:
            reason = CALL_MOVED
        case _:
            assert_never(cause)
    c = state.committed
    waiting = c.waiting
    call_end: CallEnd | None = None
    if (c.status == Status.WAITING_LLM and isinstance(waiting, AwaitLLM)) or (
        c.status == Status.SUMMARIZING and isinstance(waiting, AwaitSummary)
    ):
        call_end = CallEnd(waiting.call_id, CallOutcome.CANCELED, reason)
    return Transition(state, (), Canceled(reason=reason), call_end=call_end)


def on_resume(state: RuntimeState, input: Resume) -> Transition:
    """Continue from the committed state. A run that was driving another turn than the
    conversation's current one lost it to another request and ends canceled."""
    c = state.committed
    if input.turn_id is not None and input.turn_id != c.turn_id:
        return Transition(state, (), Canceled(reason=CONTINUED_ELSEWHERE))
    waiting = c.waiting
    match c.status:
        case Status.WAITING_LLM:
            assert isinstance(waiting, AwaitLLM)
            command: Command = ResendLLM(
                call_id=waiting.call_id,
                messages_hash=waiting.messages_hash,
                model=model_of(c, waiting),
            )
            return Transition(state, (), command)
        case Status.WAITING_CLIENT:
            assert isinstance(waiting, AwaitClient)
            return _resume_tool(state, waiting, input)
        case Status.FINAL:
            last = c.messages[-1] if c.messages else None
            answer = last if isinstance(last, AssistantMessage) else loop_failure("")
            return Transition(state, (), Final(message=answer, replay=True))
        case Status.FAILED:
            failure = loop_failure("the previous attempt of this turn failed")
            return Transition(state, (), Failed(message=failure))
        case Status.CANCELED:
            return Transition(state, (), Canceled(reason="the turn was canceled"))
        case Status.READY:
            failure = loop_failure("there is nothing to resume")
            return Transition(state, (), Failed(message=failure, kind=FailureKind.BAD_REQUEST))
        case Status.SUMMARIZING:
            # The same summary call again (the same request; the runtime resends its stored
            # bytes): its answer is applied once, by its input id.
            assert isinstance(waiting, AwaitSummary)
            return Transition(state, (), summarize_command(c, waiting))
        case _:
            assert_never(c.status)


def _resume_tool(state: RuntimeState, waiting: AwaitClient, input: Resume) -> Transition:
    op = input.operation
    if op is None or op.operation_id != waiting.operation_id:
        # Never recorded as sent: send it now.
        return Transition(state, (), call_client(state.committed, waiting))
    if op.result is not None:  # answered, but the answer's commit was lost
        return on_tool_result(state, ToolResult(message=op.result))
    if op.sent:
        call = waiting.calls[waiting.next]
        if call.name == TASK.name:  # its helper may have ended: the store may hold its report
            return Transition(state, (), FindHelper(operation_id=op.operation_id, tool_call=call))
        lost = ToolLost(operation_id=op.operation_id, cause=LostCause.ANSWER_LOST)
        return on_tool_lost(state, lost)
    return Transition(state, (), call_client(state.committed, waiting))


def on_helper_found(state: RuntimeState, input: HelperFound) -> Transition:
    """The end of a Task call's helper, looked for after a restart: its report answers the
    call; none found keeps the exactly-once rule (the outcome is unknown)."""
    c = state.committed
    waiting = c.waiting
    if c.status != Status.WAITING_CLIENT or not isinstance(waiting, AwaitClient):
        return ignore(state, Ignored.NOT_AWAITED)
    if waiting.operation_id != input.operation_id:
        return ignore(state, Ignored.OTHER_OPERATION)
    if input.result is not None:
        return on_tool_result(state, ToolResult(message=input.result))
    lost = ToolLost(operation_id=input.operation_id, cause=LostCause.ANSWER_LOST)
    return on_tool_lost(state, lost)


def on_rewind(state: RuntimeState, input: Rewind) -> Transition:
    """The client went back to an earlier turn: that turn's view becomes the active history
    again, followed by whatever is appended from now on. Nothing is deleted: the abandoned
    messages stay in the log. A conversation busy with a turn is not rewound."""
    c = state.committed
    if c.busy:
        return ignore(state, Ignored.BUSY)
    problem = view.problem(input.view, len(c.log))
    if problem is not None:
        raise LoopError(f"cannot rewind conversation {c.conversation_id!r}: {problem}")
    restored = view.reopened(input.view, len(c.log))
    if view.closed(restored, len(c.log)) == view.closed(c.view, len(c.log)):
        return ignore(state, Ignored.ALREADY_THERE)
    messages = view.materialize(restored, c.log)
    c2 = commit(
        c,
        view=restored,
        messages=messages,
        fresh_from=derived.fresh_from(c, restored),  # a turn of another epoch, or none
        todos=derived.todos_in_view(c, restored),  # the list as it was at the kept turn
        plan=derived.plan_in_view(c, restored),  # and the plan
        status=Status.READY,
        waiting=None,
        queued=(),
        queued_context=None,
    )
    return settle(c2, (), WAIT_INPUT)
