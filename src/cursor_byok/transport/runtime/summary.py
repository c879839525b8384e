"""What the runtime tells observability: one summary per run and the state of its caches.

Plain values, handed to the hooks the composition root installs (RunnerServices.on_run_end,
Metrics.bind_caches). Observability imports this module and nothing else of the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...llm.types import Usage


@dataclass
class RunSummary:
    """One line per run for logs and metrics."""

    request_id: str
    conversation_id: str = ""
    model: str = ""
    provider: str = ""
    outcome: str = "unknown"  # ok, failed, canceled, error
    llm_calls: int = 0
    fallbacks: int = 0  # calls repeated on a fallback model after a failure before output
    usage: Usage = field(default_factory=Usage)
    ttft_ms: int | None = None
    duration_ms: int = 0
    cost_usd: float = 0.0  # the sum of the costs stored with its calls
    unpriced_calls: int = 0  # its finished calls stored without a cost (no prices)
    error: str | None = None
    # For the dashboard: the first words of the run's user message (what the client shows as
    # the chat's name, see NameAgent), and the model id the client asked for, kept apart from
    # `model` (a metric label) so a name this server does not serve never becomes a label.
    title: str = ""
    requested_model: str = ""
    # The person token the run was made under (its id, "" for none), and the limit that
    # refused one of its model calls ("" for none: access.Limit's value).
    token_id: str = ""
    refused_by: str = ""
    # The helpers (Task children) this run waited for: their tokens and cost, counted in
    # their own runs' summaries and added here only to the turn's totals the client sees.
    helper_usage: Usage = field(default_factory=Usage)
    helper_cost_usd: float = 0.0
    # The outcome stored with the commit of the turn's answer (RunnerServices.outcome_row; ""
    # for none): the run's outcome record needs no write of its own when it ended so.
    outcome_stored: str = ""

    def copy(self) -> RunSummary:
        """A copy to change apart from this one (its values are immutable, so a shallow one;
        half of what copy.copy costs)."""
        twin = object.__new__(RunSummary)
        twin.__dict__.update(self.__dict__)
        return twin


@dataclass(frozen=True, slots=True)
class CompactionSummary:
    """One compaction, for the metrics (its summary call's cost comes with its call record)."""

    model: str
    reason: str  # threshold, overflow, requested
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True, slots=True)
class CacheStats:
    """One of the runtime's in-memory caches, for /metrics."""

    name: str
    entries: int
    bytes: int
    hits: int
    misses: int
