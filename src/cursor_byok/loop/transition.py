"""`transition(state, input) -> Transition`: the only place that decides (design §5-7, §10).

Every rule of the conversation lives in this package: how a turn starts, streams, calls tools
and ends; what a cancel, a newer run, a lost answer, a reopened run or a rewind does. The
runtime executes the returned command and never decides any of this itself. docs/loop.md has
the rules as a table.

This module is the dispatcher: each input goes to the rules of its concern, one module each
(`turns`, `streaming`, `tool_phase`, `recovery`, `summaries`, with `model_calls` for the
calls they make and `step` for what they return). Besides the next state, the events to
publish and the command, a transition says what it did that the runtime must carry out: the
messages it appended to the log (`appended`, stored as rows in the same commit), the tool calls
it answered itself (`local_results`, whose cards the client still needs) and how the model call
it closed ended (`call_end`, for its record).
"""

from __future__ import annotations

from typing import assert_never

import msgspec

from . import view
from .admission import on_call_refused
from .inputs import (
    Admission,
    Admitted,
    CallRefused,
    Cancel,
    ClientGone,
    Compact,
    DefinitionsRead,
    HelperFound,
    Input,
    LLMEvent,
    Note,
    Resume,
    Rewind,
    Start,
    SummaryDone,
    SummaryFailed,
    Supersede,
    Suspend,
    ToolLost,
    ToolResult,
    TurnMarksFound,
    UserMessage,
)
from .recovery import (
    CONTINUED_ELSEWHERE,
    on_cancel,
    on_helper_found,
    on_resume,
    on_rewind,
    on_suspend,
    on_turn_marks_found,
    restored_view,
)
from .results import CALL_STREAM_CLOSED, CALL_SUPERSEDED, canceled_call, not_reopened
from .state import RuntimeState, Status
from .step import (
    CallEnd,
    CallOutcome,
    Checkpoint,
    Compacted,
    Ignored,
    LocalResult,
    LoopError,
    Transition,
    WindowReport,
)
from .streaming import on_llm_event
from .summaries import on_compact, on_summary_done, on_summary_failed
from .tool_phase import on_tool_lost, on_tool_result
from .turns import on_definitions_read, on_note, on_start, on_user_message, opening_message


def transition(state: RuntimeState, input: Input) -> Transition:
    before = state.committed.log
    match input:
        case LLMEvent():
            t = on_llm_event(state, input)
        case ToolResult():
            t = on_tool_result(state, input)
        case Start():
            t = on_start(state, input)
        case Note():
            t = on_note(state, input)
        case UserMessage():
            t = on_user_message(state, input)
        case Cancel():
            call = canceled_call(input.reason, Cancel().reason)
            t = on_cancel(state, input.reason, cards=True, call_reason=call)
        case Supersede():
            t = on_cancel(state, input.reason, cards=True, call_reason=CALL_SUPERSEDED)
        case ClientGone(grace_s=grace):
            reason = not_reopened(grace) if grace else CALL_STREAM_CLOSED
            t = on_cancel(state, reason, cards=False, call_reason=reason)
        case Suspend():
            t = on_suspend(state, input.cause)
        case Resume():
            t = on_resume(state, input)
        case HelperFound():
            t = on_helper_found(state, input)
        case ToolLost():
            t = on_tool_lost(state, input)
        case Rewind():
            t = on_rewind(state, input)
        case SummaryDone():
            t = on_summary_done(state, input)
        case SummaryFailed():
            t = on_summary_failed(state, input)
        case Compact():
            t = on_compact(state)
        case CallRefused():
            t = on_call_refused(state, input)
        case DefinitionsRead():
            t = on_definitions_read(state, input)
        case TurnMarksFound():
            t = on_turn_marks_found(state, input)
        case _:
            assert_never(input)
    after = t.state.committed.log
    if after is before:
        return t
    # The log only grows: what this transition appended is its new tail.
    return msgspec.structs.replace(t, appended=after[len(before) :])


def _unopened(state: RuntimeState) -> RuntimeState:
    c = state.committed
    opened_at = c.turn_starts[-1].view  # where the refused turn began
    restored = view.reopened(opened_at, len(c.log))
    return RuntimeState(restored_view(c, restored, c.turn_starts[:-1]))


def admit(state: RuntimeState, planned: Transition, admission: Admission) -> Transition:
    """`planned` (what `transition(state, input)` returned, its command a model call) once
    the runtime answered that call's admission, before anything of it is committed.

    Admitted: `planned` itself. Refused: when `planned` opened a turn (a run request, a
    follow-up), the turn does not begin: the conversation stays as it was (the client sends
    the same message again) and the run fails with the limit's error; so for the turn's first
    call after its MCP definition files were read (the turn's opening, committed before the
    reads, leaves the view; the log keeps it). Otherwise the refusal
    applies to the planned state (admission.py) and the two are one transition, committed
    once: what the turn had received (tool answers, the model's last answer) is kept, then the
    turn fails. The refused call was planned in the same commit, so it never had a record and
    has no end; a call resumed from the store (`planned` committed nothing) gets one."""
    if isinstance(admission, Admitted):
        return planned
    if planned.state.committed.turn != state.committed.turn:
        refused = on_call_refused(planned.state, admission)
        return Transition(state, (), refused.command)
    refused = transition(planned.state, admission)
    if refused.ignored is not None:
        raise LoopError(f"an admission for {admission.call_id!r}, which is not the planned call")
    if state.committed.status == Status.READING:
        # The turn's first call, after its MCP definition files: the turn is not begun
        # either; its opening leaves the view (kept in the log), as if it never came.
        refused = msgspec.structs.replace(refused, state=_unopened(refused.state))
    resumed = planned.state.committed.commit == state.committed.commit
    return Transition(
        refused.state,
        planned.emit + refused.emit,
        refused.command,
        appended=planned.appended + refused.appended,
        local_results=planned.local_results + refused.local_results,
        call_end=refused.call_end if resumed else planned.call_end,
        compacted=planned.compacted,
    )


__all__ = [
    "CONTINUED_ELSEWHERE",
    "CallEnd",
    "CallOutcome",
    "Checkpoint",
    "Compacted",
    "Ignored",
    "LocalResult",
    "LoopError",
    "Transition",
    "WindowReport",
    "admit",
    "opening_message",
    "transition",
]
