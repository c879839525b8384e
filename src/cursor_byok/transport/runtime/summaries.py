"""A run's compaction summary calls: the budget the loop decides by, the calls themselves, and
what the client and the checkpoint are told of compactions.

A summary call is made like a model call (`ModelCalls`, on the compaction model with its answer
bounded by the window's `summary_output`): its record, with the exact request bytes, goes in the
commit that decides it, so a run resumed after a crash sends the same bytes again, and its usage
and cost are recorded like any call's. Its stream is not shown to the client: its answer comes
back to the loop as one `SummaryDone` (or `SummaryFailed`), applied once by its input id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec

from ...llm.events import DoneEvent, ErrorEvent, ResponseEvent
from ...llm.models import Model
from ...llm.stream import LLM, PreparedRequest
from ...loop import (
    CallEnd,
    CallLLM,
    ContextWindow,
    ConversationState,
    Input,
    ResendLLM,
    Summarize,
    SummaryDone,
    SummaryFailed,
    compaction,
    derived,
)
from ...store.api import LLMCallRecord, Reservation, ReservationTotals, Store
from ..cursor import SummaryRecord
from .calls import CallNotResendable, ModelCalls
from .request_bases import RequestBases

# Room left for a model's answer when it has no max_output_tokens: at most this many tokens,
# and at most a quarter of its window (docs/operations.md, "Limits and deadlines").
OUTPUT_RESERVE = 8192
# The summary's own answer bound (further bounded by the summarizing model's max_output_tokens
# and a quarter of its window).
SUMMARY_OUTPUT = 4096

HOOK_MESSAGE = "Earlier messages were summarized to free context."
NOTHING_TO_COMPACT = "Nothing to compact yet."


def context_window(model: Model, summarizer: Model, provider_tokens: int = 0) -> ContextWindow:
    """The budget the loop decides compactions by, for a run of `model` (loop/window.py).

    The summary's own bound comes from the model that writes it (its max_output_tokens and a
    quarter of its window); the loop lowers it per compaction to what the main model's window
    holds. `provider_tokens`: the window `model`'s provider reported (0: none); it applies to
    the summary request too when the model writes its own summaries."""
    window = model.context_window
    reserve = model.settings.max_output_tokens or min(OUTPUT_RESERVE, window // 4)
    summary_output = min(
        SUMMARY_OUTPUT,
        summarizer.settings.max_output_tokens or SUMMARY_OUTPUT,
        max(summarizer.context_window // 4, 1),
    )
    return ContextWindow(
        tokens=window,
        threshold=model.compaction_threshold,
        output_reserve=reserve,
        summary_window=0 if summarizer.id == model.id else summarizer.context_window,
        summary_output=summary_output,
        provider_tokens=provider_tokens,
    )


def summary_records(state: ConversationState) -> list[SummaryRecord]:
    """The compactions of the active history for the checkpoint, oldest first: the epoch the
    view is in and those before it (a rewind before every compaction has none)."""
    epoch = derived.epoch_of(state, state.view)
    if epoch is None:
        return []
    out: list[SummaryRecord] = []
    for mark in state.compactions:
        if mark.at > epoch.at:
            continue
        text = state.log[mark.at].text if mark.at < len(state.log) else ""
        out.append(
            SummaryRecord(
                summary=text.removeprefix(compaction.SUMMARY_HEADER), window_tail=mark.kept
            )
        )
    return out


class SummaryCalls:
    def __init__(
        self,
        *,
        summarizer: Model,
        llm: LLM,
        store: Store,
        conversation_id: str,
        summary_output: int,
        deliver: Callable[[Input, str], Awaitable[None]],
        token_id: str | None = None,
        owner: str = "",
        prompt_cache_key: str = "",
    ) -> None:
        """`token_id`: the person token of the run (its summary calls count toward it);
        `owner`: the process id stored with each call (its lease); `prompt_cache_key`: the
        conversation's cache key, when the run made it already."""
        bounded = msgspec.structs.replace(
            summarizer,
            settings=msgspec.structs.replace(summarizer.settings, max_output_tokens=summary_output),
        )
        self.model = summarizer
        # A base of their own: summary requests never become the base of the conversation's
        # next model call's stored delta.
        self._calls = ModelCalls(
            model=bounded,
            llm=llm,
            store=store,
            bases=RequestBases(),
            conversation_id=conversation_id,
            on_event=self._on_event,
            token_id=token_id,
            owner=owner,
            prompt_cache_key=prompt_cache_key,
        )
        self._deliver = deliver
        self._ends: dict[str, ResponseEvent] = {}

    @staticmethod
    def _as_call(command: Summarize) -> CallLLM:
        return CallLLM(
            call_id=command.call_id, request=command.request, messages_hash=command.messages_hash
        )

    def prepare(self, command: Summarize) -> PreparedRequest:
        return self._calls.prepare(
            self._as_call(command), max_output_tokens=command.max_output_tokens
        )

    def planned(
        self,
        command: Summarize,
        prepared: PreparedRequest,
        turn_id: str,
        now_ms: int,
        reserved_usd: float | None = None,
    ) -> LLMCallRecord:
        record, _ = self._calls.planned(
            self._as_call(command), prepared, turn_id, now_ms, reserved_usd
        )
        return record

    async def start(
        self,
        command: Summarize,
        prepared: PreparedRequest | None,
        reserve_of: Callable[[PreparedRequest], Reservation | None] | None = None,
        now_ms: int = 0,
    ) -> tuple[Reservation, ReservationTotals] | None:
        """Send the call: `prepared` right after its commit, else (a resumed run) its stored
        bytes, reserving `reserve_of` as ModelCalls.resend does (the refusal comes back); a
        call never recorded is prepared again (the request is the same)."""
        if self._calls.streaming(command.call_id):
            return None
        if prepared is not None:
            self._calls.open(command.call_id, prepared)
            return None
        try:
            return await self._calls.resend(
                ResendLLM(call_id=command.call_id, messages_hash=command.messages_hash),
                reserve_of,
                now_ms,
            )
        except CallNotResendable:
            self._calls.open(command.call_id, self.prepare(command))
        return None

    async def _on_event(self, call_id: str, event: ResponseEvent) -> None:
        if isinstance(event, DoneEvent):
            self._ends[call_id] = event
            await self._deliver(
                SummaryDone(call_id=call_id, message=event.message), f"{call_id}:end"
            )
        elif isinstance(event, ErrorEvent):
            self._ends[call_id] = event
            await self._deliver(
                SummaryFailed(call_id=call_id, message=event.message), f"{call_id}:end"
            )

    async def recall(self, call_id: str) -> None:
        await self._calls.recall(call_id)

    def finished(self, end: CallEnd, now_ms: int) -> LLMCallRecord | None:
        return self._calls.finished(end, self._ends.get(end.call_id), now_ms)

    def end_all(self, reason: str, now_ms: int) -> list[LLMCallRecord]:
        """ModelCalls.end_all: the summary calls still "planned" when the run ends."""
        return self._calls.end_all(reason, now_ms)

    def close(self) -> None:
        self._calls.close()


__all__ = [
    "HOOK_MESSAGE",
    "NOTHING_TO_COMPACT",
    "SummaryCalls",
    "context_window",
    "summary_records",
]
