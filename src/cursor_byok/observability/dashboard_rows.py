"""The rows of the dashboard's JSON: one dict per LLM call, run and conversation.

Every text that may echo a secret (errors, titles) is scrubbed again here. Costs are the ones
stored with the calls (computed once, at the prices in force when each was made), never priced
again from today's configuration: a call made without prices says "unpriced", not $0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..config import Config
from ..llm.models import decode_prices
from ..loop import ids
from ..store.api import ConversationOverview, LLMCallRecord, RunOutcomeRecord
from ..store.price_spans import PriceSpan
from .logs import redact_text
from .metrics import FINAL_STATUSES, cache_hit_ratio
from .outcomes import is_failure


def model_ids_of(config: Config, provider: str | None, upstream_model: str | None) -> list[str]:
    """The configured model ids that send to this provider and upstream model."""
    return [
        m.id
        for m in config.models.values()
        if m.provider.name == provider and m.settings.model == upstream_model
    ]


def _scrub(text: str | None, secrets: Sequence[str]) -> str | None:
    return redact_text(text, secrets) if text else None


def _outcome(record: LLMCallRecord) -> str:
    return FINAL_STATUSES.get(record.status, record.status)


def call_row(record: LLMCallRecord, secrets: Sequence[str]) -> dict[str, Any]:
    inp = record.input_tokens
    read = record.cache_read_tokens
    write = record.cache_write_tokens
    ratio = cache_hit_ratio(inp or 0, read or 0, write or 0) if inp is not None else None
    cost = record.cost_usd
    final = record.status in FINAL_STATUSES
    return {
        "call_id": record.call_id,
        "time_ms": record.finished_at_ms or record.created_at_ms,
        "created_at_ms": record.created_at_ms,
        "conversation_id": record.conversation_id,
        "turn_id": record.turn_id,
        "provider": record.provider,
        "model": record.model,
        "api": record.api,
        "status": record.status,
        "outcome": _outcome(record),
        "ttft_ms": record.ttft_ms,
        "duration_ms": record.duration_ms,
        "input_tokens": inp,
        "output_tokens": record.output_tokens,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "reasoning_tokens": record.reasoning_tokens,
        # Which counts are the server's estimates (a call ended before the provider counted).
        "estimated_tokens": record.estimated_tokens,
        "cache_hit_ratio": None if ratio is None else round(ratio, 4),
        "cost_usd": cost,
        # A finished call stored without a cost: its model had no prices when it was made.
        "unpriced": final and cost is None,
        "error": _scrub(record.error, secrets),
        # The call this one stands in for on a fallback model (loop/ids.py names it), or None.
        "fallback_of": _fallback_of(record.call_id),
    }


def _fallback_of(call_id: str) -> str | None:
    found = ids.fallback_of(call_id)
    return found[0] if found is not None else None


def run_row(record: RunOutcomeRecord, secrets: Sequence[str]) -> dict[str, Any]:
    return {
        "request_id": record.request_id,
        "conversation_id": record.conversation_id,
        "time_ms": record.finished_at_ms,
        "title": _scrub(record.title, secrets) or "",
        "model": record.model,
        "provider": record.provider,
        "outcome": record.outcome,
        "failed": is_failure(record.outcome),
        "duration_ms": record.duration_ms,
        "llm_calls": record.llm_calls,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cache_read_tokens": record.cache_read_tokens,
        "cache_write_tokens": record.cache_write_tokens,
        "cost_usd": record.cost_usd,
        # Some of its calls were made without prices: their cost is unknown, not $0.
        "unpriced": record.unpriced_calls > 0,
        "unpriced_calls": record.unpriced_calls,
        "error": _scrub(record.error, secrets),
    }


def conversation_row(c: ConversationOverview, secrets: Sequence[str]) -> dict[str, Any]:
    tokens = c.input_tokens + c.output_tokens + c.cache_read_tokens + c.cache_write_tokens
    return {
        "id": c.conversation_id,
        "title": _scrub(c.title, secrets) or "",
        "model": c.model,
        "provider": c.provider,
        "turns": c.turns,
        "runs": c.runs,
        "failed_runs": c.failed_runs,
        "llm_calls": c.llm_calls,
        "failed_calls": c.failed_calls,
        "tokens": tokens,
        "input_tokens": c.input_tokens,
        "output_tokens": c.output_tokens,
        "cache_read_tokens": c.cache_read_tokens,
        "cache_write_tokens": c.cache_write_tokens,
        "reasoning_tokens": c.reasoning_tokens,
        "cost_usd": c.cost_usd,
        "unpriced_calls": c.unpriced_calls,
        "last_error": _scrub(c.last_error, secrets),
        "last_error_at_ms": c.last_error_at_ms,
        "message_count": c.message_count,
        "version": c.version,
        "created_at_ms": c.created_at_ms,
        "updated_at_ms": c.last_activity_ms,
    }


def price_span_row(span: PriceSpan) -> dict[str, Any]:
    """One set of prices a model's calls were made at (None: unpriced), and from when."""
    prices = decode_prices(span.prices)
    return {
        "provider": span.provider,
        "model": span.model,
        "prices": None if prices is None else msgspec.structs.asdict(prices),
        "first_ms": span.first_ms,
        "last_ms": span.last_ms,
        "calls": span.calls,
    }
