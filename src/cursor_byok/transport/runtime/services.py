"""What the runtime needs from the composition root: the models, the store, the provider
clients, the bounds and switches of the configuration, and the observability hooks."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ...llm.model_names import ModelNames
from ...llm.models import Model
from ...llm.stream import LLM
from ...store.api import ConversationClaims, LLMCallRecord, RunOutcomeRecord, Store
from ...web.page_text import DEFAULT_MAX_TEXT_CHARS
from ...web.prices import JobPrices
from ...web.types import JobRunner
from .provider_windows import ProviderWindows
from .summary import CompactionSummary, RunSummary

DEFAULT_MAX_DEPTH = 2  # server.subagent_max_depth's default: Task's nesting


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class RunnerServices:
    """What the runtime needs from the composition root."""

    models: Mapping[str, Model]  # by id, in the configuration's order
    store: Store
    llm_for: Callable[[Model], LLM]
    now_ms: Callable[[], int] = wall_ms
    tool_timeout_s: float = 600.0
    # A question form or an approval waits on a person: its own, longer bound.
    question_timeout_s: float = 1800.0
    context_timeout_s: float = 30.0
    supersede_timeout_s: float = 15.0
    fsync_model_calls: bool = False
    disabled_tools: tuple[str, ...] = ()  # server.disabled_tools: catalogue tools switched off
    enabled_tools: tuple[str, ...] = ()  # server.enabled_tools: opt-in tools switched on
    web_search_configured: bool = False  # [web_search] names a backend: WebSearch may be offered
    image_generation: bool = False  # an [image_generation] is configured: GenerateImage offered
    # Observability hooks; each runs outside the transport's path and must not raise.
    on_llm_call: Callable[[LLMCallRecord], None] | None = None
    on_run_end: Callable[[RunSummary], None] | None = None
    on_fallback: Callable[[str, str], None] | None = None  # (model id, fallback model id)
    on_unknown_event: Callable[[str], None] | None = None
    on_compaction: Callable[[CompactionSummary], None] | None = None
    # The stored record of a run that ends as `summary` says, at that time (ms): built by
    # observability, written with the commit of the turn's answer (None: by on_run_end alone).
    outcome_row: Callable[[RunSummary, int], RunOutcomeRecord] | None = None
    unknown_kinds: set[str] = field(default_factory=set)  # logged once each
    # Runs the server's own work for a tool call (web search, image generation); None: none.
    run_job: JobRunner | None = None
    # What those jobs cost (images, priced searches), charged to the run's token (charges.py).
    job_prices: JobPrices | None = None
    page_text_chars: int = DEFAULT_MAX_TEXT_CHARS  # [web_fetch] max_text_chars
    default_model: str | None = None  # server.default_model: for names not served
    subagent_max_depth: int = DEFAULT_MAX_DEPTH  # server.subagent_max_depth: Task's nesting
    # Replicas on one PostgreSQL: a claim announced by another process makes this one's run of
    # that conversation give way, as a newer run of this process does (None: SQLite, where
    # the version compare-and-set alone decides between processes).
    claims: ConversationClaims | None = None
    # The windows providers reported, per model, for this process (never written anywhere).
    provider_windows: ProviderWindows = field(default_factory=ProviderWindows)
    model_names: ModelNames = field(init=False)  # what run requests' model names resolve by

    def __post_init__(self) -> None:
        self.model_names = ModelNames(self.models.values(), self.default_model)
