"""Tavily's search API (help.tavily.com, "Tavily Search API").

`POST https://api.tavily.com/search` with `Authorization: Bearer <key>` and a JSON body
`{"query": ..., "max_results": N}`; the answer's `results` each have `title`, `url` and
`content`. `max_results` is at most 20.
"""

from __future__ import annotations

from typing import Any

from ..types import JobFailed, SearchResults, WebSearchJob
from .http import request_json
from .results import hits_from
from .settings import TavilySpec

__all__ = ["Tavily", "parse_tavily"]

MAX_RESULTS = 20


def parse_tavily(name: str, data: Any, max_results: int) -> SearchResults | JobFailed:
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return JobFailed(message=f"search backend {name!r} answered without a results list")
    hits = hits_from(data["results"], max_results, snippet_key="content")
    return SearchResults(hits=hits, backend=name)


class Tavily:
    def __init__(self, spec: TavilySpec, timeout_s: float) -> None:
        self.name = spec.name
        self._url = spec.url
        self._key = spec.api_key
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"<Tavily {self.name} {self._url}>"

    async def search(self, job: WebSearchJob, max_results: int) -> SearchResults | JobFailed:
        data = await request_json(
            self.name,
            "POST",
            self._url,
            timeout_s=self._timeout_s,
            headers={"authorization": f"Bearer {self._key}"},
            body={"query": job.query, "max_results": min(max_results, MAX_RESULTS)},
        )
        if isinstance(data, JobFailed):
            return data
        return parse_tavily(self.name, data, max_results)
