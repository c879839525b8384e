"""How a run ends: the ending the client gets for each way a run stops, and the run's summary
(one per run for logs and metrics) with the model-call records handed to metrics."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import assert_never

from ...loop import FailureKind, Limit
from ...store.api import LLMCallRecord, RunOutcomeRecord
from ...store.errors import StoreError, StoreFullError, StoreLockedError, StoreUnreachableError
from ..connect.channel import EndError
from ..cursor import (
    DialectError,
    Ending,
    bad_request_end,
    internal_end,
    model_not_allowed_end,
    not_yours_end,
    over_budget_end,
    provider_error_end,
    rate_limited_end,
    token_revoked_end,
    unavailable_end,
)
from .calls import CallNotResendable
from .conversation import ConversationGone, NotYours
from .records import record_usage
from .requests import ClientTimeout
from .summary import RunSummary

log = logging.getLogger("cursor_byok.runtime")


class RunFailed(Exception):
    """The run cannot go on; `ending` is what the client is told."""

    def __init__(self, ending: Ending) -> None:
        super().__init__(ending.message)
        self.ending = ending


def failure_ending(kind: FailureKind, text: str, limit: Limit | None = None) -> Ending:
    """The ending of a turn the loop failed, by the kind of failure (and, for a refused
    model call, the limit that refused it)."""
    match kind:
        case FailureKind.PROVIDER:
            return provider_error_end(text)
        case FailureKind.BAD_REQUEST:
            return bad_request_end(text)
        case FailureKind.INTERNAL:
            return internal_end(text)
        case FailureKind.REFUSED if limit is not None:
            return refusal_ending(limit, text)
        case FailureKind.REFUSED:  # a loop bug: a refusal always names its limit
            return internal_end(text)
        case _:
            assert_never(kind)


def refusal_ending(limit: Limit, text: str) -> Ending:
    """What the client is told when a person token's limit refuses a model call."""
    match limit:
        case Limit.REVOKED:
            return token_revoked_end(text)
        case Limit.MODELS:
            return model_not_allowed_end(text)
        case Limit.BUDGET:
            return over_budget_end(text)
        case Limit.RATE:
            return rate_limited_end(text)
        case _:
            assert_never(limit)


def ending_of(exc: Exception, request_id: str) -> tuple[Ending, str]:
    """The ending and outcome of a run stopped by `exc`: each kind of failure has its own."""
    match exc:
        case RunFailed():
            return exc.ending, "failed"
        case NotYours():
            return not_yours_end(str(exc)), "failed"
        case StoreError():
            log.error("store error in run %s: %s", request_id, exc)
            return storage_ending(exc), "error"
        case ClientTimeout() | DialectError():
            return bad_request_end(str(exc)), "failed"
        case CallNotResendable() | ConversationGone():
            return internal_end(str(exc)), "error"
        case _:  # a bug must end this run, never the server
            log.error("run %s failed", request_id, exc_info=exc)
            return internal_end(f"internal error: {type(exc).__name__}"), "error"


def storage_ending(exc: StoreError) -> Ending:
    """What the client is told of a storage error: whether to try again, never the server's
    paths or SQLite's words (the log has those, with the run's request id)."""
    match exc:
        case StoreFullError():
            return unavailable_end(
                "the server's storage is full; try again once its operator has freed space",
                "Server storage full",
            )
        case StoreUnreachableError():
            return unavailable_end(
                "the server cannot reach its storage right now; try again in a moment",
                "Server storage unavailable",
            )
        case StoreLockedError():
            return unavailable_end(
                "the server's storage is busy (another process holds its database); try again",
                "Server storage busy",
            )
        case _:
            return internal_end(
                "the server could not read or write its storage; its log has the details"
            )


def end_error(ending: Ending) -> EndError:
    return EndError(ending.code, ending.message, ending.details)


def counted(summary: RunSummary, record: LLMCallRecord) -> bool:
    """A finished call joins `summary` (False: a planned one, not yet)."""
    if record.status == "planned":
        return False
    summary.llm_calls += 1
    summary.cost_usd += record.cost_usd or 0.0
    if record.cost_usd is None:  # its model had no prices when it was made
        summary.unpriced_calls += 1
    if record.status == "canceled":
        # Ended before its terminal event reached the run (canceled, superseded, shut down):
        # what it cost is in its record only.
        summary.usage = summary.usage + record_usage(record)
    if summary.ttft_ms is None and record.ttft_ms is not None:
        summary.ttft_ms = record.ttft_ms
    return True


class Reports:
    """The run's summary and the model-call records for metrics, handed to observability after
    what the client waits for has gone out."""

    def __init__(
        self,
        summary: RunSummary,
        *,
        on_llm_call: Callable[[LLMCallRecord], None] | None,
        on_run_end: Callable[[RunSummary], None] | None,
    ) -> None:
        self.summary = summary
        self._on_llm_call = on_llm_call
        self._on_run_end = on_run_end
        self._t0 = time.monotonic()
        self._unreported: list[LLMCallRecord] = []

    def account(self, calls: list[LLMCallRecord], *, turn_ends: bool) -> None:
        """Finished calls join the summary; metrics get them now, or for the call that ends the
        turn, once the stream has ended."""
        for record in calls:
            if counted(self.summary, record) and self._on_llm_call is not None:
                self._unreported.append(record)
        if not turn_ends:
            self.report_calls()

    def ending(self, calls: list[LLMCallRecord], outcome: str) -> RunSummary:
        """The summary of the run if it ends now as `outcome`, once the commit of `calls` is
        made: its outcome record is written with that commit (then `stored`)."""
        ending = self.summary.copy()
        for record in calls:
            counted(ending, record)
        ending.outcome = outcome
        ending.duration_ms = int((time.monotonic() - self._t0) * 1000)
        return ending

    def stored(self, row: RunOutcomeRecord) -> None:
        """`row` was committed: the run's end writes it again only if it ends otherwise."""
        self.summary.outcome_stored = row.outcome

    def report_calls(self) -> None:
        if self._on_llm_call is not None and self._unreported:
            loop = asyncio.get_running_loop()
            for record in self._unreported:
                loop.call_soon(self._on_llm_call, record)
        self._unreported.clear()

    def ended(self, ending: Ending | None, outcome: str) -> None:
        summary = self.summary
        summary.outcome = outcome
        if ending is not None:
            summary.error = ending.message
        summary.duration_ms = int((time.monotonic() - self._t0) * 1000)
        self.report_calls()
        if self._on_run_end is not None:
            # After the transport has written the end: logs and metrics are not on its path.
            asyncio.get_running_loop().call_soon(self._on_run_end, summary)
