"""The server's own work for a tool call, charged like a model call: an image made or a search
a priced backend answered (web/prices.py says what each costs).

A priced job of a run under a person token with a budget first reserves the most it can cost
(`Store.reserve_llm_call`: one atomic step with the budget's check, as a model call's commit
does); when that does not fit, the job does not run and the tool gets the budget's words. The
job's record (`llm_calls`, api "image" or "search", its call id the tool operation's) then
settles to what the job cost, so the person's spend, `token list`, the dashboard and the
budget count it. A run without a token records the cost alone.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

import msgspec

from ...store.api import LLMCallRecord, Reservation
from ...web.prices import JobCharge, JobPrices
from ...web.types import JobFailed, JobOutcome, JobRunner, ServerJob
from .reservations import month_window, refusal_words
from .services import RunnerServices

log = logging.getLogger("cursor_byok.runtime")


class JobCharges:
    """Runs one run's server jobs through `services.run_job`, charging the priced ones."""

    def __init__(
        self,
        services: RunnerServices,
        run_job: JobRunner,
        *,
        token_id: str | None,
        where: Callable[[], tuple[str, str]],
    ) -> None:
        """`where`: the run's conversation and turn, when a job runs."""
        self._services = services
        self._run_job = run_job
        self._prices: JobPrices | None = services.job_prices
        self._token_id = token_id
        self._where = where

    async def run(self, operation_id: str, job: ServerJob) -> JobOutcome:
        charge = self._prices.charge(job) if self._prices is not None else None
        if charge is None:
            return await self._run_job(job)
        store, now = self._services.store, self._services.now_ms()
        planned = self._record(operation_id, job, charge, now)
        if self._token_id is not None:
            record = await store.get_access_token(self._token_id)
            if record is not None and record.budget_usd is not None:
                start, end, _ = month_window(now)
                reserve = Reservation(
                    token_id=record.token_id,
                    amount_usd=charge.bound_usd,
                    budget_usd=record.budget_usd,
                    since_ms=start,
                    until_ms=end,
                )
                totals = await store.reserve_llm_call(planned, reserve)
                if totals.refused_by is not None:
                    _, words = refusal_words(record, reserve, totals, now)
                    return JobFailed(message=words)
        outcome = await self._run_job(job)
        cost = self._prices.cost(job, outcome) if self._prices is not None else 0.0
        failed = isinstance(outcome, JobFailed)
        finished = msgspec.structs.replace(
            planned,
            status="failed" if failed else "committed",
            cost_usd=cost,
            error=outcome.message if isinstance(outcome, JobFailed) else None,
            finished_at_ms=self._services.now_ms(),
        )
        await store.save_llm_call(finished)
        if self._services.on_llm_call is not None:  # /metrics' job counters
            self._services.on_llm_call(finished)
        return outcome

    def _record(
        self, operation_id: str, job: ServerJob, charge: JobCharge, now: int
    ) -> LLMCallRecord:
        conversation_id, turn_id = self._where()
        request = msgspec.json.encode(job)
        return LLMCallRecord(
            call_id=f"{operation_id}:{charge.api}",
            conversation_id=conversation_id,
            turn_id=turn_id,
            request=request,
            request_hash=hashlib.sha256(request).hexdigest(),
            messages_hash="",
            status="planned",
            created_at_ms=now,
            provider=charge.provider,
            model=charge.model,
            api=charge.api,
            token_id=self._token_id,
            reserved_usd=charge.bound_usd,
        )


__all__ = ["JobCharges"]
