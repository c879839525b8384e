"""A model call refused by a person token's limit (docs/loop.md, "Limits").

The runtime answers every model call the loop plans (a turn's call, a fallback, a resent call,
a compaction's summary call, a helper's call under its parent's token) with an admission before
the call's commit: admitted, or `CallRefused{limit, message}`. The runtime only checks the
token (its budget, rate and models: transport/runtime/access.py); what a refusal means for the
conversation is decided here, like any other input:

- the refused call is the awaited one (`AwaitLLM` or `AwaitSummary` of that id): the turn fails
  with the limit's error (`Failed{kind=REFUSED, limit}`), and what the turn received before
  the refusal stays committed: the client's tool answers, the model's last answer, steering
  messages. The call itself never went out (`call_end` FAILED, for a call already recorded);
- any other call: ignored, saying why.

Whether a planned transition's refusal keeps anything at all (a turn refused at its opening
call does not begin) is `transition.admit`'s rule, which composes the two.
"""

from __future__ import annotations

from .commands import Failed, FailureKind
from .inputs import CallRefused
from .results import loop_failure
from .state import AwaitLLM, AwaitSummary, RuntimeState, Status
from .step import (
    CallEnd,
    CallOutcome,
    Ignored,
    Transition,
    commit,
    ignore,
    settle,
    with_messages,
)


def on_call_refused(state: RuntimeState, input: CallRefused) -> Transition:
    c = state.committed
    waiting = c.waiting
    calling = c.status == Status.WAITING_LLM and isinstance(waiting, AwaitLLM)
    summarizing = c.status == Status.SUMMARIZING and isinstance(waiting, AwaitSummary)
    if not (calling or summarizing) or not isinstance(waiting, AwaitLLM | AwaitSummary):
        return ignore(state, Ignored.NOT_AWAITED)
    if waiting.call_id != input.call_id:
        return ignore(state, Ignored.OTHER_CALL)
    if isinstance(waiting, AwaitLLM) and waiting.describing is not None:
        # The user's message stays (with its notes), as every answer the turn had received.
        c = with_messages(c, waiting.describing.message)
    c2 = commit(c, status=Status.FAILED, waiting=None, queued=(), queued_context=None)
    failed = Failed(
        message=loop_failure(input.message), kind=FailureKind.REFUSED, limit=input.limit
    )
    end = CallEnd(input.call_id, CallOutcome.FAILED, input.message)
    return settle(c2, (), failed, call_end=end)


__all__ = ["on_call_refused"]
