"""A run that stops or picks up again: cancel and supersede, a client gone for good, a run
suspended without deciding its turn, resume from the committed state, and the client's rewind
to an earlier turn."""

from __future__ import annotations

from typing import assert_never

import msgspec

from cursor_byok.llm.types import AssistantMessage, ToolCall

from . import derived, ids, meter, view
from .commands import (
    WAIT_INPUT,
    Canceled,
    Command,
    Failed,
    FailureKind,
    Final,
    FindHelper,
    ReadDefinitions,
    ResendLLM,
)
from .inputs import HelperFound, Resume, Rewind, SuspendCause, ToolOperation, TurnMarksFound
from .model_calls import model_of, summarize_command
from .results import CALL_MOVED, CALL_SHUTDOWN, loop_failure, unknown_outcome_result
from .state import (
    AwaitClient,
    AwaitDefinitions,
    AwaitLLM,
    AwaitSummary,
    ConversationState,
    RuntimeState,
    Status,
    TurnStart,
)
from .step import (
    CallEnd,
    CallOutcome,
    Ignored,
    LocalResult,
    LoopError,
    Transition,
    commit,
    content_index,
    ignore,
    settle,
)
from .tool_phase import advance, call_client
from .tools import side_effects
from .tools_agent import TASK
from .turns import close_turn
from .view import Span

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
        case Status.READING:
            # The files again: a read has no side effect, and its answer applies once.
            assert isinstance(waiting, AwaitDefinitions)
            return Transition(state, (), ReadDefinitions(paths=waiting.paths))
        case _:
            assert_never(c.status)


def _resume_tool(
    state: RuntimeState, waiting: AwaitClient, input: Resume, *, find_helpers: bool = True
) -> Transition:
    """Each outstanding operation by what the store knows of it: never recorded as sent, it is
    sent now; answered but the answer's commit was lost, the answer applies; sent and never
    answered, it is lost (a call with side effects gets an "unknown outcome" result, never a
    second run; one without is sent again). The others of the message go on."""
    c = state.committed
    records = input.records()
    if find_helpers and (lost := _sent_task(waiting, records)) is not None:
        # Its helper may have ended: the store may hold its report (HelperFound comes back).
        op, call = lost
        return Transition(state, (), FindHelper(op, call, tuple(records.values())))
    held = list(waiting.early)
    local: list[LocalResult] = []
    resend: list[str] = []
    for call in waiting.calls[waiting.next :]:
        op = ids.operation_id(waiting.call_id, call.id)
        if op not in waiting.unanswered():
            continue
        record = records.get(op)
        if record is None or not record.sent:
            resend.append(op)
        elif record.result is not None:
            held.append(_replace(record.result, tool_name=call.name))
        elif side_effects(call.name):
            result = unknown_outcome_result(call)
            held.append(result)
            local.append(
                LocalResult(call, waiting.call_id, content_index(c.messages, call.id), result)
            )
        else:
            resend.append(op)
    if len(held) == len(waiting.early):  # nothing came back: send what is owed again
        return Transition(state, (), call_client(c, waiting))
    answered = {r.tool_call_id for r in held}
    outstanding = tuple(o for o in waiting.unanswered() if o in resend)
    still = _replace(waiting, early=tuple(held), outstanding=outstanding, operation_id="")
    del answered
    return advance(_replace(c, waiting=still), tuple(local), resend=outstanding)


def _sent_task(
    waiting: AwaitClient, records: dict[str, ToolOperation]
) -> tuple[str, ToolCall] | None:
    """The first outstanding Task call sent before a restart whose answer was lost."""
    for call in waiting.calls[waiting.next :]:
        op = ids.operation_id(waiting.call_id, call.id)
        record = records.get(op)
        unanswered = record is not None and record.sent and record.result is None
        if call.name == TASK.name and op in waiting.unanswered() and unanswered:
            return op, call
    return None


def on_helper_found(state: RuntimeState, input: HelperFound) -> Transition:
    """The end of a Task call's helper, looked for after a restart: its report is the call's
    answer; none found keeps the exactly-once rule (the outcome is unknown). The turn's other
    operations go on as the Resume that asked found them."""
    c = state.committed
    waiting = c.waiting
    if c.status != Status.WAITING_CLIENT or not isinstance(waiting, AwaitClient):
        return ignore(state, Ignored.NOT_AWAITED)
    if input.operation_id not in waiting.unanswered():
        return ignore(state, Ignored.OTHER_OPERATION)
    records = {op.operation_id: op for op in input.operations}
    if input.result is not None:
        found = records.get(input.operation_id, ToolOperation(input.operation_id, sent=True))
        records[input.operation_id] = _replace(found, result=input.result)
    resume = Resume(turn_id=c.turn_id, operations=tuple(records.values()))
    return _resume_tool(state, waiting, resume, find_helpers=False)


def on_rewind(state: RuntimeState, input: Rewind) -> Transition:
    """The client went back to the end of an earlier turn: that turn's view becomes the active
    history again (in its own compaction epoch, its unsummarized turns included), followed by
    whatever is appended from now on; the later turn marks go. Nothing is deleted: the
    abandoned messages stay in the log. A conversation busy with a turn is not rewound."""
    c = state.committed
    if c.busy:
        return ignore(state, Ignored.BUSY)
    if input.turns:
        if input.turns < 0:
            raise LoopError(
                f"cannot rewind conversation {c.conversation_id!r} to turn {input.turns}"
            )
        if input.turns >= len(c.turn_starts):
            return ignore(state, Ignored.ALREADY_THERE)
        target = c.turn_starts[input.turns].view  # where the next turn began
        kept = c.turn_starts[: input.turns]
    else:
        target = input.view
        ends = derived.turn_ends(c)  # the turns that ended on the restored branch stay
        kept = tuple(
            t for t, end in zip(c.turn_starts, ends, strict=True) if view.is_prefix(end, target)
        )
    problem = view.problem(target, len(c.log))
    if problem is not None:
        raise LoopError(f"cannot rewind conversation {c.conversation_id!r}: {problem}")
    restored = view.reopened(target, len(c.log))
    if view.closed(restored, len(c.log)) == view.closed(c.view, len(c.log)) and (
        len(kept) == len(c.turn_starts)
    ):
        return ignore(state, Ignored.ALREADY_THERE)
    c2 = commit(
        restored_view(c, restored, kept),
        status=Status.READY,
        waiting=None,
        queued=(),
        queued_context=None,
    )
    return settle(c2, (), WAIT_INPUT)


def restored_view(
    c: ConversationState, restored: tuple[Span, ...], kept: tuple[TurnStart, ...]
) -> ConversationState:
    """`c` with `restored` (a reopened view) as its active history and `kept` as its turn
    marks, and what the view implies (uncommitted)."""
    c2 = _replace(
        c,
        view=restored,
        messages=view.materialize(restored, c.log),
        fresh_from=derived.fresh_from(c, restored),  # a turn of another epoch, or none
        todos=derived.todos_in_view(c, restored),  # the list as it was at the kept turn
        plan=derived.plan_in_view(c, restored),  # and the plan
        turn_starts=kept,
    )
    # The meter of the restored view: measured once here.
    return _replace(c2, meter_basis=meter.basis_of(c2))


def wants_turn_marks(c: ConversationState) -> bool:
    """Whether `c` had turns before the loop kept its marks (a state stored before them): the
    store's record of its published turns would give them back (TurnMarksFound)."""
    return c.turn > 0 and not c.turn_starts


def on_turn_marks_found(state: RuntimeState, input: TurnMarksFound) -> Transition:
    """Marks for a state stored before the loop kept its own: turn k+1 began where the store
    says turn k ended. The ends that name no valid view of the log (rows from before the log
    was append-only) and everything after the first of them are left out. When the last end
    is not the current view, the current view is a turn of its own after them."""
    c = state.committed
    if c.busy:
        return ignore(state, Ignored.BUSY)
    if not wants_turn_marks(c):
        return ignore(state, Ignored.ALREADY_THERE)
    ends: list[tuple[Span, ...]] = []
    for end in input.ends:
        if view.problem(end, len(c.log)) is not None:
            break
        ends.append(end)
    if not ends:
        return ignore(state, Ignored.NOT_AWAITED)
    if ends[-1] == view.closed(c.view, len(c.log)):
        ends.pop()  # the last turn's end is the current view
    starts = (TurnStart(view=()), *(TurnStart(view=end) for end in ends))
    return settle(commit(c, turn_starts=starts), (), WAIT_INPUT)
