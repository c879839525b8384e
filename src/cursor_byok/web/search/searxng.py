"""A self-hosted SearXNG instance through its JSON API.

docs.searxng.org/dev/search_api: `GET /search?q=...&format=json`; the answer's `results` each
have `title`, `url` and `content` (the snippet). An instance whose settings.yml does not enable
the json format answers 403, which the message points at.
"""

from __future__ import annotations

from typing import Any

from ..types import JobFailed, SearchResults, WebSearchJob
from .http import request_json
from .results import hits_from
from .settings import SearxngSpec

__all__ = ["Searxng", "parse_searxng"]


def parse_searxng(name: str, data: Any, max_results: int) -> SearchResults | JobFailed:
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return JobFailed(message=f"search backend {name!r} answered without a results list")
    hits = hits_from(data["results"], max_results, snippet_key="content")
    return SearchResults(hits=hits, backend=name)


class Searxng:
    def __init__(self, spec: SearxngSpec, timeout_s: float) -> None:
        self.name = spec.name
        self._url = spec.url.rstrip("/") + "/search"
        self._timeout_s = timeout_s

    async def search(self, job: WebSearchJob, max_results: int) -> SearchResults | JobFailed:
        data = await request_json(
            self.name,
            "GET",
            self._url,
            timeout_s=self._timeout_s,
            params={"q": job.query, "format": "json"},
        )
        if isinstance(data, JobFailed):
            if "HTTP 403" in data.message:
                return JobFailed(
                    message=data.message + " (is the json format enabled in its settings.yml?)"
                )
            return data
        return parse_searxng(self.name, data, max_results)
