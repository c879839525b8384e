"""The stored record of how a run ended (store table run_outcomes), built from the runtime's
run summary: what the dashboard lists as runs, failed ones with their message.

A run refused before it began (an unknown model) makes no LLM call and commits nothing, so this
record is the only stored trace of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..store.api import RunOutcomeRecord
from .logs import redact_text

if TYPE_CHECKING:
    from ..transport.runtime.summary import RunSummary

# The runtime's outcomes that are errors: `failed` (the client's request or the provider),
# `error` (this server). `ok` and `canceled` are not.
FAILED_OUTCOMES = frozenset({"failed", "error"})
MAX_ERROR_CHARS = 4000  # a provider's error body can be long; the dashboard needs its start
MAX_TITLE_CHARS = 120


def is_failure(outcome: str) -> bool:
    return outcome in FAILED_OUTCOMES


def outcome_record(
    summary: RunSummary, finished_at_ms: int, secrets: Sequence[str] = ()
) -> RunOutcomeRecord:
    """The record of a finished run; secrets are scrubbed from its error and title."""
    error: str | None = None
    if is_failure(summary.outcome):
        error = _clip(redact_text(summary.error or summary.outcome, secrets), MAX_ERROR_CHARS)
    usage = summary.usage
    return RunOutcomeRecord(
        request_id=summary.request_id,
        conversation_id=summary.conversation_id,
        outcome=summary.outcome,
        finished_at_ms=finished_at_ms,
        duration_ms=max(0, summary.duration_ms),
        title=_clip(redact_text(summary.title, secrets), MAX_TITLE_CHARS),
        model=summary.model or summary.requested_model,
        provider=summary.provider,
        error=error,
        llm_calls=summary.llm_calls,
        input_tokens=usage.input,
        output_tokens=usage.output,
        cache_read_tokens=usage.cache_read,
        cache_write_tokens=usage.cache_write,
        cost_usd=summary.cost_usd,
        unpriced_calls=summary.unpriced_calls,
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
