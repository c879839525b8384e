"""A run's commits with their records: the model-call and tool-operation records that a
transition calls for, written in the same transaction as the state (design §7: nothing is sent
before its commit), and the records of calls the loop ended without a state change.

The loop decided everything here: which call is planned, which ended and how, which tool
answers it gave itself. This module only turns those decisions into store records.
"""

from __future__ import annotations

import asyncio
import logging

from ...llm.stream import PreparedRequest
from ...loop import (
    CallClient,
    CallClients,
    CallLLM,
    CallRefused,
    Final,
    Input,
    LLMEvent,
    Summarize,
    Transition,
    ids,
)
from ...store.api import ClientOperationRecord, CommitStatus, LLMCallRecord
from . import records
from .access import Admissions
from .calls import ModelCalls
from .checkpoints import Checkpoints, MarksWrite
from .conversation import Conversation
from .ending import Reports
from .services import RunnerServices
from .summaries import SummaryCalls
from .tools import ToolCalls

log = logging.getLogger("cursor_byok.runtime")


class Commits:
    """Commit a run's transitions with the records each one calls for."""

    def __init__(
        self,
        *,
        request_id: str,
        services: RunnerServices,
        conv: Conversation,
        calls: ModelCalls,
        summaries: SummaryCalls,
        tools: ToolCalls,
        reports: Reports,
        admissions: Admissions,
        checkpoints: Checkpoints,
    ) -> None:
        self.admissions = admissions
        self.checkpoints = checkpoints
        self.request_id = request_id
        self.services = services
        self.conv = conv
        self.calls = calls
        self.summaries = summaries
        self.tools = tools
        self.reports = reports

    def prepare(self, t: Transition) -> PreparedRequest | None:
        """The exact request of the call the transition decides, for its commit."""
        if isinstance(t.command, CallLLM):
            return self.calls.prepare(t.command)
        if isinstance(t.command, Summarize):
            return self.summaries.prepare(t.command)
        return None

    async def commit(
        self,
        input: Input,
        input_id: str | None,
        t: Transition,
        prepared: PreparedRequest | None,
        completes: ClientOperationRecord | None,
        marks: MarksWrite | None = None,
    ) -> CommitStatus | CallRefused:
        """Commit `t`; a call it plans under a person token reserves its bound of the token's
        budget and rate in this same commit (reservations.py), and a refusal comes back as
        the loop's admission input, nothing committed. `marks`: the turn marks of the
        checkpoint that ends the turn, saved in this same commit."""
        after = t.state.committed
        now = self.services.now_ms()
        reserve = self.admissions.reservation(t.command, prepared)
        held = (
            reserve.amount_usd if reserve is not None and reserve.budget_usd is not None else None
        )
        calls: list[LLMCallRecord] = []
        operations: list[ClientOperationRecord] = []
        finished = self.ended_call(input, t, now)
        if finished is not None:
            calls.append(finished)
        on_commit = None
        if isinstance(t.command, CallLLM):
            assert prepared is not None
            planned, on_commit = self.calls.planned(t.command, prepared, after.turn_id, now, held)
            calls.append(planned)
        elif isinstance(t.command, Summarize):
            assert prepared is not None
            calls.append(self.summaries.planned(t.command, prepared, after.turn_id, now, held))
        if completes is not None:
            operations.append(completes)
        for local in t.local_results:
            # A call the loop answered for the client (lost, timed out, canceled): its record,
            # when there is one, keeps that answer.
            known = self.tools.record(ids.operation_id(local.llm_call_id, local.call.id))
            if known is not None and known.status != "completed" and known is not completes:
                operations.append(records.completed_operation(known, local.result, now))
        if isinstance(t.command, CallClient):
            operations.append(self.tools.planned(t.command, after))
        elif isinstance(t.command, CallClients):  # each is recorded as sent before it goes
            operations.extend(self.tools.planned(call, after) for call in t.command.calls)
        ends = None
        if isinstance(t.command, Final) and (row := self.services.outcome_row) is not None:
            # A commit that ends the turn ends the run well (Commands: Final): its outcome
            # record is written with it, no write of its own after the run.
            ends = row(self.reports.ending(calls, "ok"), now)
        outcome = await self.conv.commit(
            t,
            input_id,
            calls=calls,
            operations=operations,
            # Losing a commit whose command is a model call costs at most that call again (same
            # bytes); every commit that sends a tool or ends a turn is fsynced, with all before.
            durable=self.services.fsync_model_calls or not isinstance(t.command, CallLLM),
            reserve=reserve,
            turn_marks=None if marks is None else marks.marks,
            unchanged_marks=0 if marks is None else marks.unchanged,
            run_outcome=ends,
        )
        status = outcome.status
        if status == "refused":
            assert reserve is not None and outcome.reservation is not None
            assert isinstance(t.command, CallLLM | Summarize)
            return self.admissions.refused(t.command, reserve, outcome.reservation)
        if status == "committed":
            if marks is not None:
                self.checkpoints.committed(marks, self.conv.version)
            if ends is not None:
                self.reports.stored(ends)
            if on_commit is not None:
                on_commit()
            self.reports.account(calls, turn_ends=isinstance(t.command, Final))
            if isinstance(t.command, CallLLM) and t.command.fallback_of:
                self._fell_back(t.command, t.call_end.error if t.call_end is not None else None)
        return status

    def ended_call(self, input: Input, t: Transition, now: int) -> LLMCallRecord | None:
        """The record of the call `t` ends: a model call's, else a summary call's (ended by
        its answer, or stopped: its stream aborted here)."""
        if t.call_end is None:
            return None
        event = input.event if isinstance(input, LLMEvent) else None
        finished = self.calls.finished(t.call_end, event, now)
        return finished if finished is not None else self.summaries.finished(t.call_end, now)

    async def save_call_end(self, input: Input, t: Transition) -> None:
        """A call the loop ended without a state change (a Suspend: the turn goes on
        elsewhere), recorded alone so that no record stays planned."""
        finished = self.ended_call(input, t, self.services.now_ms())
        if finished is not None:
            await self.services.store.save_llm_call(finished)
            self.reports.account([finished], turn_ends=False)

    def _fell_back(self, command: CallLLM, why: str | None) -> None:
        """One log line and one count per fallback the loop decided."""
        failed = self.calls.target(command.fallback_of).model.id
        log.warning(
            "run %s: model %s failed before its first output (%s); falling back to %s (call %s)",
            self.request_id,
            failed,
            why or "no error message",
            command.model,
            command.call_id,
        )
        self.reports.summary.fallbacks += 1
        if self.services.on_fallback is not None:
            asyncio.get_running_loop().call_soon(self.services.on_fallback, failed, command.model)
