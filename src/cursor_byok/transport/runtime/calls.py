"""The model calls of one run: their exact requests, records and timings, and the streams.

A call's request is prepared (serialized) once, stored in the commit that decides the call, and
sent from those bytes; a resumed call is sent again from the stored bytes. A call goes to the
run's model unless the loop named another (a fallback, `CallLLM.model`): that call is prepared,
recorded and priced for its own model and sent through that model's provider. Each open stream
hands every event straight to the run (`on_event`) from the task that reads its socket
(`ResponseStream.deliver`): no queue and no task of the run's between the provider and the client.

A call the loop ends before its terminal event (a cancel, a newer run, a client gone, a
shutdown) is aborted the moment the loop says so, before the commit that records it: its
connection closes at once (llm/http.py) and its record gets the usage known so far
(`records.usage_so_far`). Whatever its stream still delivers is dropped: nobody applies it.
A run that ends with calls still "planned" (an error, a cancelled task) ends them with its
reason (`end_all`): no record stays planned after its run.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import msgspec

from ...llm import canonical
from ...llm.events import DoneEvent, ErrorEvent, ResponseEvent, StartEvent
from ...llm.models import Model
from ...llm.settings import ModelSettings, with_effort
from ...llm.stream import LLM, PreparedRequest, ResponseStream, StreamProgress
from ...llm.types import Usage
from ...loop import CallEnd, CallLLM, CallOutcome, ResendLLM
from ...store.api import LLMCallRecord, Reservation, ReservationTotals, Store
from . import records
from .request_bases import RequestBases
from .stored_request import StoredRequestError, encode_request, load_request


def cache_key(conversation_id: str) -> str:
    """A stable, non-identifying per-conversation key for provider prompt caches."""
    return "cbk-" + hashlib.sha256(conversation_id.encode()).hexdigest()[:32]


class CallNotResendable(Exception):
    """A call to resume whose stored request is missing or cannot be rebuilt."""


class UnknownFallback(CallNotResendable):
    """A call for a model this server no longer serves (a fallback or vision model named by
    a configuration that changed since the call was made)."""


@dataclass(slots=True)
class _Timing:
    opened: float
    first: float | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """Where a call goes: a model, the LLM of its provider, its settings for this conversation."""

    model: Model
    llm: LLM
    settings: ModelSettings  # the model's, with the conversation's cache key


class ModelCalls:
    def __init__(
        self,
        *,
        model: Model,
        llm: LLM,
        store: Store,
        bases: RequestBases,
        conversation_id: str,
        on_event: Callable[[str, ResponseEvent], Awaitable[None]],
        models: Mapping[str, Model] | None = None,
        llm_for: Callable[[Model], LLM] | None = None,
        token_id: str | None = None,
        owner: str = "",
        prompt_cache_key: str = "",
    ) -> None:
        """`models` and `llm_for` reach the fallback models the loop may name (none without);
        `owner`: the process id stored with each call it plans (its lease, leases.py);
        `prompt_cache_key`: the conversation's `cache_key`, when the run made it already."""
        self.model = model
        self._cache_key = prompt_cache_key or cache_key(conversation_id)
        self.owner = owner or None
        self.token_id = token_id  # stored with each planned call (the usage per token)
        self.llm = llm
        self.store = store
        self.bases = bases
        self.conversation_id = conversation_id
        self._on_event = on_event
        self._models = models or {}
        self._llm_for = llm_for
        self._own = self._target_of(model, llm)
        self._targets: dict[str, Target] = {}  # by call id, for calls to another model
        self._records: dict[str, LLMCallRecord] = {}
        self._timings: dict[str, _Timing] = {}
        self._streams: dict[str, ResponseStream] = {}
        self._closing: set[asyncio.Future[None]] = set()
        # Calls ended before their terminal event, with what they had shown when aborted.
        self._aborted: dict[str, StreamProgress] = {}
        self._prior: dict[str, records.Prior] = {}  # calls sent again: their earlier attempts
        self.first_ttft_ms: int | None = None

    # -- before the commit ------------------------------------------------------------------

    def _target_of(self, model: Model, llm: LLM) -> Target:
        settings = msgspec.structs.replace(model.settings, cache_key=self._cache_key)
        return Target(model, llm, settings)

    def _target(self, model_id: str) -> Target:
        """The run's own model for "", else the model `model_id` (a fallback, a vision model)."""
        if not model_id or model_id == self.model.id:
            return self._own
        model = self._models.get(model_id)
        if model is None or self._llm_for is None:
            raise UnknownFallback(f"the model {model_id!r} is not served any more")
        return self._target_of(model, self._llm_for(model))

    def target(self, call_id: str) -> Target:
        """Where call `call_id` goes (the run's own model unless the loop named another)."""
        return self._targets.get(call_id, self._own)

    def prepare(self, command: CallLLM, *, max_output_tokens: int = 0) -> PreparedRequest:
        """The call's request bytes; `max_output_tokens` (a summary's bound the loop planned,
        else the call's own) lowers the model's own answer bound for this call only."""
        max_output_tokens = max_output_tokens or command.max_output_tokens
        target = self._target(command.model)
        if target is not self._own:
            self._targets[command.call_id] = target
        settings = target.settings
        if 0 < max_output_tokens < (settings.max_output_tokens or max_output_tokens + 1):
            settings = msgspec.structs.replace(settings, max_output_tokens=max_output_tokens)
        if command.effort:  # the picker's effort (the loop checked the model offers it)
            settings = with_effort(settings, command.effort)
        return target.llm.prepare(command.request, settings)

    def planned(
        self,
        command: CallLLM,
        prepared: PreparedRequest,
        turn_id: str,
        now_ms: int,
        reserved_usd: float | None = None,
    ) -> tuple[LLMCallRecord, Callable[[], None]]:
        """The call's record for the commit that decides it, and what to do once that commit
        is in (keep its body as the base of the next call's stored delta). `reserved_usd`:
        the bound of its cost its commit reserves of its token's budget (reservations.py)."""
        stored, base = encode_request(
            prepared, self.bases.get(self.conversation_id), command.call_id
        )
        record = records.planned_call(
            command,
            conversation_id=self.conversation_id,
            turn_id=turn_id,
            stored=stored,
            prepared=prepared,
            model=self.target(command.call_id).model,
            now_ms=now_ms,
            process_id=self.owner,
        )
        if self.token_id is not None:
            record = msgspec.structs.replace(
                record, token_id=self.token_id, reserved_usd=reserved_usd
            )
        self._records[command.call_id] = record

        def committed() -> None:
            self.bases.remember(self.conversation_id, base)

        return record, committed

    def finished(
        self, end: CallEnd, event: ResponseEvent | None, now_ms: int
    ) -> LLMCallRecord | None:
        """The call's record once the loop said how it ended; None for a call this run has no
        record of."""
        record = self._records.get(end.call_id)
        if record is None:
            return None
        message = event.message if isinstance(event, DoneEvent | ErrorEvent) else None
        estimated: str | None = None
        if message is not None:
            usage = message.usage
        elif end.call_id in self._timings:  # sent, ended before its terminal event: stopped
            usage, estimated = records.usage_so_far(self._abort(end.call_id), record)
        else:  # never sent by this run (refused, or ended before it went out): it cost nothing
            usage = Usage()
        timing = self._timings.get(end.call_id)
        now = time.monotonic()
        ttft = (
            int((timing.first - timing.opened) * 1000)
            if timing is not None and timing.first is not None
            else None
        )
        duration = int((now - timing.opened) * 1000) if timing is not None else None
        if ttft is not None and self.first_ttft_ms is None:
            self.first_ttft_ms = ttft
        answer = (
            canonical.encode_message(event.message)
            if isinstance(event, DoneEvent) and end.outcome == CallOutcome.COMMITTED
            else None
        )
        updated = records.finished_call(
            record,
            end,
            usage=usage,
            answer_bytes=answer,
            ttft_ms=ttft,
            duration_ms=duration,
            now_ms=now_ms,
            estimated=estimated,
            prior=self._prior.get(end.call_id),
        )
        self._records[end.call_id] = updated
        return updated

    def end_all(self, reason: str, now_ms: int) -> list[LLMCallRecord]:
        """The run is over: every call still "planned" ends canceled with `reason` (its stream
        aborted, its usage what it had shown); their records, to be saved."""
        ended: list[LLMCallRecord] = []
        for call_id, record in list(self._records.items()):
            if record.status == "planned":
                finished = self.finished(
                    CallEnd(call_id, CallOutcome.CANCELED, reason), None, now_ms
                )
                if finished is not None:
                    ended.append(finished)
        return ended

    def _abort(self, call_id: str) -> StreamProgress:
        """Stop call `call_id`'s stream now (what it delivers from here on is dropped) and
        say what it had shown; the same again for a call stopped before."""
        stream = self._streams.pop(call_id, None)
        if stream is not None:
            self._aborted[call_id] = stream.progress()
            self._close_later(stream)
        return self._aborted.get(call_id, StreamProgress())

    def _close_later(self, stream: ResponseStream) -> None:
        # aclose() drops the connection in its first step, before any await: at the loop's
        # next turn, whatever the caller awaits meanwhile (the commit that records the end).
        task = asyncio.ensure_future(stream.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # -- streams ----------------------------------------------------------------------------

    def streaming(self, call_id: str) -> bool:
        return call_id in self._streams

    def open(self, call_id: str, prepared: PreparedRequest) -> None:
        """Send the request and have its events delivered (nothing when it is open already)."""
        if call_id in self._streams:
            return
        timing = _Timing(opened=time.monotonic())
        self._timings[call_id] = timing
        stream = self.target(call_id).llm.send(prepared)
        self._streams[call_id] = stream
        on_event = self._on_event

        async def sink(event: ResponseEvent) -> None:
            """Design §7.2 `readLLM`: each upstream event becomes an input of the run, in order."""
            if call_id in self._aborted:
                return  # ended by the loop or the run: nobody applies it
            if timing.first is None and not isinstance(event, StartEvent | ErrorEvent):
                timing.first = time.monotonic()
            if isinstance(event, DoneEvent | ErrorEvent):
                self._streams.pop(call_id, None)
            await on_event(call_id, event)

        stream.deliver(sink)

    async def resend(
        self,
        command: ResendLLM,
        reserve_of: Callable[[PreparedRequest], Reservation | None] | None = None,
        now_ms: int = 0,
    ) -> tuple[Reservation, ReservationTotals] | None:
        """Stream a call again from its stored request (a resumed turn). `reserve_of`: what
        planning it again reserves of its token's limits (access.Admissions), taken with its
        record in one step of the store, as a new call's commit does; when that does not fit,
        the call is not sent and the reservation and the store's totals come back."""
        if command.call_id in self._streams:
            return None
        target = self._target(command.model)
        if target is not self._own:
            self._targets[command.call_id] = target
        record = await self.store.get_llm_call(command.call_id)
        if record is None:
            raise CallNotResendable("the interrupted model call was not recorded")
        try:
            prepared = await load_request(record.request, record.request_hash, self._stored)
        except StoredRequestError as exc:
            raise CallNotResendable(f"the interrupted model call cannot be resent: {exc}") from None
        # Planned again, by this process: an attempt that ended before (a shutdown, a process
        # that died) keeps its usage in the record, and this attempt's is added at its end.
        self._prior[command.call_id] = records.prior_usage(record)
        self._aborted.pop(command.call_id, None)
        reserve = reserve_of(prepared) if reserve_of is not None else None
        if reserve is not None:
            stored = record
            record = msgspec.structs.replace(
                record,
                status="planned",
                process_id=self.owner,
                finished_at_ms=None,
                created_at_ms=max(now_ms, record.created_at_ms),
                reserved_usd=reserve.amount_usd if reserve.budget_usd is not None else None,
            )
            totals = await self.store.reserve_llm_call(record, reserve)
            if totals.refused_by is not None:
                self._records[command.call_id] = stored  # finished by the loop's refusal
                return reserve, totals
        elif record.status != "planned" or record.process_id != self.owner:
            record = msgspec.structs.replace(
                record, status="planned", process_id=self.owner, finished_at_ms=None
            )
            await self.store.save_llm_call(record)
        self._records[command.call_id] = record
        self.open(command.call_id, prepared)
        return None

    async def recall(self, call_id: str) -> None:
        """Read call `call_id`'s record from the store, for `finished` (a call resumed from
        the store that ends before it is sent again)."""
        if call_id not in self._records:
            record = await self.store.get_llm_call(call_id)
            if record is not None:
                self._records[call_id] = record

    async def _stored(self, call_id: str) -> bytes | None:
        record = await self.store.get_llm_call(call_id)
        return record.request if record is not None else None

    def close(self) -> None:
        """Abort every open stream (what it still delivers is dropped); a call left "planned"
        is ended by `end_all`."""
        for call_id in list(self._streams):
            self._abort(call_id)

    def records(self) -> list[LLMCallRecord]:
        return list(self._records.values())


__all__ = ["CallNotResendable", "ModelCalls", "Target", "UnknownFallback", "cache_key"]
