"""The search backend of kind "provider": a configured provider's own web search.

After the IDE approved a WebSearch, one separate, search-only call goes to the provider
(llm/native_search.py owns its request and stream formats); its hits become `SearchResults`.
Nothing of that call enters the conversation: the query goes out alone, the hits come back.
"""

from __future__ import annotations

import logging
from typing import Self

import msgspec

from ...llm.http import HttpAdapter
from ...llm.native_search import NativeSearchFailed, NativeSearchResult, native_search
from ...llm.registry import LLMRegistry
from ...llm.settings import ProviderSettings
from ..types import JobFailed, SearchHit, SearchResults, WebSearchJob

__all__ = ["ProviderSearch", "ProviderSearchSpec"]

log = logging.getLogger("cursor_byok.web")


class ProviderSearchSpec(msgspec.Struct, frozen=True):
    """`[web_search.backend.NAME] kind = "provider"`, resolved: the provider (its api is one
    of llm.native_search.SEARCH_APIS, checked by the configuration) and the upstream model."""

    name: str
    provider: ProviderSettings
    model: str


class ProviderSearch:
    """A search backend (`name`, `search`) over one provider adapter (the registry's, so the
    search shares the provider's connection pool). `timeout_s` bounds the whole call: a
    provider searches and then writes, so it takes longer than a search API."""

    def __init__(self, spec: ProviderSearchSpec, adapter: HttpAdapter, *, timeout_s: float) -> None:
        self.name = spec.name
        self._spec = spec
        self._adapter = adapter
        self._timeout_s = timeout_s

    @classmethod
    def of(cls, spec: ProviderSearchSpec, registry: LLMRegistry, *, timeout_s: float) -> Self:
        """The backend for `spec`, over the registry's adapter of its provider."""
        return cls(spec, registry.adapter(spec.provider), timeout_s=timeout_s)

    async def search(self, job: WebSearchJob, max_results: int) -> SearchResults | JobFailed:
        try:
            outcome = await native_search(
                self._adapter,
                self._spec.model,
                job.query,
                max_results=max_results,
                timeout_s=self._timeout_s,
            )
        except Exception:  # a backend never raises: a failure is a result the model reads
            log.exception("web search backend %s failed", self.name)
            return JobFailed(f"web search ({self.name}): the search call failed")
        match outcome:
            case NativeSearchResult(hits=hits, usage=usage):
                log.info(
                    "web search backend %s (%s %s): %d hits, tokens in=%d out=%d",
                    self.name,
                    self._spec.provider.name,
                    self._spec.model,
                    len(hits),
                    usage.input + usage.cache_read + usage.cache_write,
                    usage.output,
                )
                return SearchResults(
                    hits=tuple(
                        SearchHit(title=h.title, url=h.url, snippet=h.snippet) for h in hits
                    ),
                    backend=self.name,
                )
            case NativeSearchFailed(message=message):
                log.warning("web search backend %s: %s", self.name, message)
                return JobFailed(f"web search ({self.name}): {message}")
