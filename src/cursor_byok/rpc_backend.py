"""What the unary RPCs read from the store or ask a model (transport.cursor.rpc_base.RpcBackend).

- `person`: GetMe answers with the person whose token the request carries.
- `context_meter`: GetPromptContextUsage answers with the meter kept with the conversation's
  latest model call (`llm_calls.prompt_breakdown`, docs/loop.md "Context meter").
- `conversation_cloned`: NotifyConversationClone's notice, noted in the store for forks.
- `chat_name`: NameAgent asks `[server] title_model` for a few words, within
  `title_timeout_s`; the call is recorded and priced like any other model call, under the
  caller's token (so it counts against that token's budget, and a token whose budget is
  spent, or which is over its rate, gets the text rule instead), in the conversation
  `TITLE_CONVERSATION` (a request to name a chat names no conversation of ours).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from typing import Literal

import msgspec

from .access_tokens import TokenDirectory
from .config import Config
from .llm.events import DoneEvent, ErrorEvent
from .llm.models import Model, call_cost, encode_prices
from .llm.registry import LLMRegistry
from .llm.types import AssistantMessage, RequestMessages, Usage, UserMessage
from .loop import ConversationState
from .loop.meter import Meter, PromptChars, measure
from .store.api import AccessTokenRecord, LLMCallRecord, Store
from .transport.cursor.rpc_base import MeterRefused, Person
from .transport.runtime.access import TokenLimits
from .transport.runtime.records import (
    decode_call_meter,
    encode_call_meter,
    encode_state,
    request_hash,
    usage_so_far,
)
from .transport.runtime.reservations import refusal_words, reservation
from .transport.runtime.stored_request import encode_whole

log = logging.getLogger("cursor_byok.titles")

TITLE_CONVERSATION = "cbk-titles"
TITLE_PROMPT = (
    "You name chats. Answer with a title of at most six words for the chat that starts with "
    "the user's message: plain words, no quotes, no punctuation at the end, nothing else."
)
TITLE_MAX_TOKENS = 24


class RpcAnswers:
    def __init__(
        self,
        config: Config,
        store: Store,
        registry: LLMRegistry,
        tokens: TokenDirectory,
        *,
        on_llm_call: Callable[[LLMCallRecord], None] | None = None,
        limits: TokenLimits | None = None,
        clock: Callable[[], float] = time.time,
        process_id: str | None = None,
    ) -> None:
        """`process_id`: this process's lease (runtime/leases.py), stored with each title call
        so that one left in flight by a process that died is finished by another, its
        reservation let go."""
        self._process_id = process_id
        self._store = store
        self._limits = limits
        self._registry = registry
        self._tokens = tokens
        self._on_llm_call = on_llm_call
        self._clock = clock
        title = config.server.title_model
        self._title_model: Model | None = config.models[title] if title else None
        self._title_timeout_s = config.server.title_timeout_s
        self._title_conversation = False

    # -- GetMe -----------------------------------------------------------------------------

    def person(self, principal: str) -> Person | None:
        name = self._tokens.name_of(principal)
        return Person(principal=principal, name=name) if name else None

    # -- NotifyConversationClone ------------------------------------------------------------

    async def conversation_cloned(self, conversation_id: str, source_conversation_id: str) -> None:
        """Noted in the store (append-only: the first note of a conversation wins), so the
        clone's first run finds its source on any process or replica."""
        if not conversation_id or not source_conversation_id:
            return
        if conversation_id == source_conversation_id:
            return
        at_ms = int(self._clock() * 1000)
        await self._store.note_clone(conversation_id, source_conversation_id, at_ms)

    # -- GetPromptContextUsage ---------------------------------------------------------------

    async def context_meter(self, conversation_id: str, principal: str | None) -> Meter | None:
        if principal is not None:
            # Only its owner reads a conversation's meter (the operator: any).
            head = await self._store.head(conversation_id)
            if head is not None and head.owner_id != self._tokens.person(principal):
                raise MeterRefused(conversation_id)
        calls = await self._store.list_conversation_llm_calls(conversation_id, limit=50)
        measured = [c for c in calls if c.prompt_breakdown is not None]
        if not measured:
            return None
        latest = next((c for c in measured if c.status == "committed"), measured[0])
        assert latest.prompt_breakdown is not None
        return decode_call_meter(latest.prompt_breakdown).meter

    # -- NameAgent ---------------------------------------------------------------------------

    async def chat_name(self, user_words: str, principal: str | None) -> str | None:
        model = self._title_model
        if model is None:
            return None
        token: AccessTokenRecord | None = None
        if principal is not None and self._limits is not None and self._tokens.name_of(principal):
            # The operator's model, like a compaction model: outside the token's models
            # limit; its budget, rate and revocation apply as to any call (the budget and the
            # rate reserved with its record, `_ask`).
            refusal, token = await self._limits.screen(principal, model, scoped=False)
            if refusal is not None:
                log.info("title model %s not asked: %s", model.id, refusal.message)
                return None
        try:
            return await asyncio.wait_for(
                self._ask(model, user_words[:4000], principal, token), self._title_timeout_s
            )
        except TimeoutError:
            log.warning("title model %s did not answer in %.0f s", model.id, self._title_timeout_s)
        except Exception as exc:  # any failure: the text rule names the chat
            log.warning("title model %s failed: %s", model.id, exc)
        return None

    async def _ask(
        self, model: Model, words: str, principal: str | None, token: AccessTokenRecord | None
    ) -> str | None:
        llm = self._registry.llm(model.provider)
        request = RequestMessages(
            system_prompt=TITLE_PROMPT, messages=(UserMessage.of_text(words),)
        )
        # A few words: a small output cap, no reasoning budget to spend on them.
        settings = msgspec.structs.replace(
            model.settings, max_output_tokens=TITLE_MAX_TOKENS, reasoning=False
        )
        prepared = llm.prepare(request, settings)
        await self._ensure_title_conversation()
        now = self._now_ms()
        chars = PromptChars(system_prompt=len(TITLE_PROMPT), conversation=len(words))
        record = LLMCallRecord(
            call_id="title-" + secrets.token_hex(8),
            conversation_id=TITLE_CONVERSATION,
            turn_id="title",
            request=encode_whole(prepared),
            request_hash=request_hash(prepared),
            messages_hash="",
            status="planned",  # until it ends; a dead process's is finished by the lease rules
            process_id=self._process_id,
            created_at_ms=now,
            provider=model.provider.name,
            model=prepared.model,
            api=model.provider.api,
            token_id=principal,
            prices=encode_prices(model.prices),
            # Its meter, as any call's: what a timed-out call's input is estimated from.
            prompt_breakdown=encode_call_meter(
                chars, measure(chars, used=0, window=model.context_window)
            ),
        )
        # Its bound as any call's, its output cap the title's.
        capped = msgspec.structs.replace(model, settings=settings)
        reserve = reservation(token, capped, prepared, now) if token is not None else None
        if token is None or reserve is None:
            await self._store.save_llm_call(record)
        else:
            # One atomic step of the store, as a run's call reserves in its commit: the bound
            # of its cost against the person's budget, one call against the shared rate.
            if reserve.budget_usd is not None:
                record = msgspec.structs.replace(record, reserved_usd=reserve.amount_usd)
            totals = await self._store.reserve_llm_call(record, reserve)
            if totals.refused_by is not None:
                _, why = refusal_words(token, reserve, totals, now)
                log.info("title model %s not asked: %s", model.id, why)
                return None
        started = time.monotonic()
        message: AssistantMessage | None = None
        error: str | None = None
        stream = llm.send(prepared)
        try:
            while True:
                event = await stream.recv()
                if isinstance(event, DoneEvent):
                    message = event.message
                    break
                if isinstance(event, ErrorEvent):
                    message = event.message
                    error = event.message.error_message or event.reason
                    break
        except asyncio.CancelledError:  # the timeout: the text rule answers
            # Closing a stream that is still waiting may re-raise the cancellation of its
            # reader: the record is finished all the same.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await stream.aclose()
            # Charged like any call stopped mid-answer: what it streamed, its input estimated
            # where the provider had not counted it yet.
            usage, estimated = usage_so_far(stream.progress(), record)
            await self._finish(record, usage, "canceled", "timed out", started, estimated)
            raise
        usage = message.usage if message is not None else None
        await self._finish(record, usage, "failed" if error else "committed", error, started)
        return None if error or message is None else message.text.strip() or None

    async def _finish(
        self,
        record: LLMCallRecord,
        usage: Usage | None,
        status: Literal["committed", "failed", "canceled"],
        error: str | None,
        started: float,
        estimated: str | None = None,
    ) -> None:
        done = msgspec.structs.replace(
            record,
            status=status,
            input_tokens=usage.input if usage else None,
            output_tokens=usage.output if usage else None,
            cache_read_tokens=usage.cache_read if usage else None,
            cache_write_tokens=usage.cache_write if usage else None,
            reasoning_tokens=usage.reasoning if usage else None,
            duration_ms=int((time.monotonic() - started) * 1000),
            cost_usd=call_cost(record.prices, usage) if usage is not None else None,
            error=error,
            finished_at_ms=self._now_ms(),
            estimated_tokens=estimated,
        )
        await asyncio.shield(self._store.save_llm_call(done))
        if self._on_llm_call is not None:
            self._on_llm_call(done)

    async def _ensure_title_conversation(self) -> None:
        """The conversation title calls are recorded in: created once, with no messages."""
        if self._title_conversation:
            return
        if await self._store.head(TITLE_CONVERSATION) is None:
            state = ConversationState(conversation_id=TITLE_CONVERSATION, turn_id="title")
            await self._store.commit_input(
                TITLE_CONVERSATION,
                input_id="create",
                expected_version=0,
                state=encode_state(state),
                append_messages=(),
                expected_message_count=0,
                result=b"{}",
            )
        self._title_conversation = True

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


__all__ = ["TITLE_CONVERSATION", "TITLE_PROMPT", "RpcAnswers"]
