"""Brave Search's web search API (api-dashboard.search.brave.com/docs).

`GET https://api.search.brave.com/res/v1/web/search?q=...&count=N` with the key in the
`X-Subscription-Token` header. The answer (its `WebSearchApiResponse`) has `web.results`,
each with `title`, `url` and `description`; `count` is at most 20 ([S]: the field names are
those the API's client libraries read). An answer without `web` has no web results; one
whose shape differs is a clear failure, and the next backend is tried.
"""

from __future__ import annotations

from typing import Any

from ..types import JobFailed, SearchResults, WebSearchJob
from .http import request_json
from .results import hits_from
from .settings import BraveSpec

__all__ = ["Brave", "parse_brave"]

MAX_COUNT = 20


def parse_brave(name: str, data: Any, max_results: int) -> SearchResults | JobFailed:
    if not isinstance(data, dict):
        return JobFailed(message=f"search backend {name!r} answered without a JSON object")
    web = data.get("web", {})
    results = web.get("results", []) if isinstance(web, dict) else None
    if not isinstance(results, list):
        return JobFailed(message=f"search backend {name!r} answered without a results list")
    hits = hits_from(results, max_results, snippet_key="description")
    return SearchResults(hits=hits, backend=name)


class Brave:
    def __init__(self, spec: BraveSpec, timeout_s: float) -> None:
        self.name = spec.name
        self._url = spec.url
        self._key = spec.api_key
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"<Brave {self.name} {self._url}>"

    async def search(self, job: WebSearchJob, max_results: int) -> SearchResults | JobFailed:
        data = await request_json(
            self.name,
            "GET",
            self._url,
            timeout_s=self._timeout_s,
            params={"q": job.query, "count": str(min(max_results, MAX_COUNT))},
            headers={"x-subscription-token": self._key},
        )
        if isinstance(data, JobFailed):
            return data
        return parse_brave(self.name, data, max_results)
