"""WebSearch's backends and the ordered fallback over them.

A backend is an object with a `name` and `search(job, max_results)`; `WebSearch` tries the
run's list (the model's own, else the server-wide one) in order and the first backend that
answers wins. Every failure is a value (`JobFailed`); when all fail the message lists each.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol, assert_never

from ...llm.registry import LLMRegistry
from ..types import JobFailed, SearchResults, WebSearchJob
from .brave import Brave
from .provider import ProviderSearch, ProviderSearchSpec
from .searxng import Searxng
from .settings import BackendSpec, BraveSpec, SearxngSpec, TavilySpec, WebSearchSettings
from .tavily import Tavily

__all__ = ["SearchBackend", "WebSearch", "backend_for"]

log = logging.getLogger("cursor_byok.web.search")


class SearchBackend(Protocol):
    name: str

    async def search(self, job: WebSearchJob, max_results: int) -> SearchResults | JobFailed: ...


def backend_for(
    spec: BackendSpec, timeout_s: float, registry: LLMRegistry | None = None
) -> SearchBackend:
    """The backend for `spec`; a provider's own search runs over `registry`'s adapter of that
    provider (its connection pool, key and deadlines)."""
    match spec:
        case SearxngSpec():
            return Searxng(spec, timeout_s)
        case BraveSpec():
            return Brave(spec, timeout_s)
        case TavilySpec():
            return Tavily(spec, timeout_s)
        case ProviderSearchSpec():
            return ProviderSearch.of(spec, registry or LLMRegistry(), timeout_s=timeout_s)
        case _:
            assert_never(spec)


class WebSearch:
    """The configured search: backends by name and the order to try them in per model."""

    def __init__(
        self,
        settings: WebSearchSettings,
        backends: Mapping[str, SearchBackend] | None = None,
        *,
        registry: LLMRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.backends: dict[str, SearchBackend] = dict(
            backends
            if backends is not None
            else {
                n: backend_for(s, settings.timeout_s, registry)
                for n, s in settings.backends.items()
            }
        )

    async def search(self, job: WebSearchJob) -> SearchResults | JobFailed:
        order = self.settings.order_for(job.model)
        if not order:
            return JobFailed(message="no web search backend is configured for this model")
        failures: list[str] = []
        for name in order:
            outcome = await self.backends[name].search(job, self.settings.max_results)
            if isinstance(outcome, SearchResults):
                if failures:
                    log.info("web search answered by %r after: %s", name, "; ".join(failures))
                return outcome
            log.warning("web search: %s", outcome.message)
            failures.append(outcome.message)
        if len(failures) == 1:
            return JobFailed(message=f"the web search failed: {failures[0]}")
        return JobFailed(message="the web search failed: " + "; ".join(failures))
