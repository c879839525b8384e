"""Loopback fakes of the web search APIs our backends call, shaped as their documentation says:

- SearXNG (https://docs.searxng.org/dev/search_api): `GET /search?q=...&format=json`; "requesting
  an unset format will return a 403 Forbidden error". Its answer `{"query",
  "number_of_results", "results": [{"title", "url", "content", "engine", ...}], "answers",
  "suggestions", "infoboxes"}` is the shape SearXNG clients read (e.g. langchainjs
  searxng_search.ts).
- Brave (https://api-dashboard.search.brave.com/docs): `GET
  https://api.search.brave.com/res/v1/web/search?q=...` with `X-Subscription-Token: <key>`,
  the response is its `WebSearchApiResponse` model; the fields read here, `web.results[]`
  with `title`, `url`, `description`, and `count` at most 20, are those of the API's client
  libraries [S] (the docs page excerpt names the model, not its fields). A wrong token: 401.
- Tavily (https://help.tavily.com/articles/4840311948-tavily-search-api): `POST
  https://api.tavily.com/search` with `Authorization: Bearer tvly-...` and `{"query": ...}`
  (plus `max_results`); the answer's `results[]` carry `title`, `url`, `content`, `score`.

`behaviour` switches a fake to a failure: "500", "slow" (no answer for `slow_s`), "badjson",
"403", "redirect" (301), "huge" (a body larger than the backends read). Every request is
recorded, with whether the key header matched (the key itself is never recorded).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from cursor_byok.launch import free_port

BRAVE_KEY = "brave-test-key-5c1f"  # fake keys: never a real one
TAVILY_KEY = "tvly-test-key-9d2e"


@dataclass
class SeenRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    key_ok: bool | None  # None: this API has no key


def results_for(q: str, n: int = 3) -> list[tuple[str, str, str]]:
    """(title, url, snippet) the fakes answer for query `q`: distinct per query."""
    slug = "-".join(q.split())[:40]
    return [
        (f"Result {i} for {q}", f"https://example.org/{slug}/{i}", f"About <b>{q}</b>, part {i}.")
        for i in range(1, n + 1)
    ]


@dataclass
class SearchFakes:
    port: int = 0
    behaviour: dict[str, str] = field(default_factory=dict)  # "searxng"|"brave"|"tavily" -> mode
    slow_s: float = 30.0
    seen: list[SeenRequest] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def of(self, api: str) -> list[SeenRequest]:
        return [r for r in self.seen if r.path == PATHS[api]]

    async def _failure(self, api: str) -> web.Response | None:
        mode = self.behaviour.get(api, "ok")
        if mode == "500":
            return web.json_response({"error": "internal"}, status=500)
        if mode == "403":
            return web.Response(status=403, text="Forbidden")
        if mode == "redirect":
            return web.Response(status=301, headers={"Location": "https://elsewhere.example/"})
        if mode == "slow":
            await asyncio.sleep(self.slow_s)
        if mode == "badjson":
            return web.Response(text="<html>not json", content_type="application/json")
        if mode == "huge":
            return web.Response(body=b'{"results": "' + b"x" * (5 * 1024 * 1024) + b'"}')
        return None

    async def searxng(self, request: web.Request) -> web.Response:
        q = request.query.get("q", "")
        self.seen.append(SeenRequest("GET", request.path, dict(request.query), None, None))
        if (failed := await self._failure("searxng")) is not None:
            return failed
        if request.query.get("format") != "json":
            return web.Response(status=403, text="Forbidden")
        results = [
            {"title": t, "url": u, "content": c, "engine": "duckduckgo", "score": 1.0}
            for t, u, c in results_for(q)
        ]
        body = {"query": q, "number_of_results": len(results), "results": results}
        return web.json_response({**body, "answers": [], "suggestions": [], "infoboxes": []})

    async def brave(self, request: web.Request) -> web.Response:
        key_ok = request.headers.get("X-Subscription-Token") == BRAVE_KEY
        self.seen.append(SeenRequest("GET", request.path, dict(request.query), None, key_ok))
        if not key_ok:
            return web.json_response({"type": "ErrorResponse"}, status=401)
        if (failed := await self._failure("brave")) is not None:
            return failed
        q = request.query.get("q", "")
        count = int(request.query.get("count", "20"))
        results = [
            {"title": t, "url": u, "description": c, "type": "search_result"}
            for t, u, c in results_for(q)[:count]
        ]
        return web.json_response({"type": "search", "web": {"type": "search", "results": results}})

    async def tavily(self, request: web.Request) -> web.Response:
        key_ok = request.headers.get("Authorization") == f"Bearer {TAVILY_KEY}"
        body = await request.json()
        self.seen.append(SeenRequest("POST", request.path, dict(request.query), body, key_ok))
        if not key_ok:
            return web.json_response({"detail": {"error": "Unauthorized"}}, status=401)
        if (failed := await self._failure("tavily")) is not None:
            return failed
        q = body.get("query", "")
        results = [
            {"title": t, "url": u, "content": c, "score": 0.9}
            for t, u, c in results_for(q)[: body.get("max_results", 5)]
        ]
        return web.json_response({"query": q, "results": results, "response_time": 0.1})

    async def start(self) -> SearchFakes:
        app = web.Application()
        app.router.add_get(PATHS["searxng"], self.searxng)
        app.router.add_get(PATHS["brave"], self.brave)
        app.router.add_post(PATHS["tavily"], self.tavily)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = self.port or free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


PATHS = {"searxng": "/search", "brave": "/res/v1/web/search", "tavily": "/tavily/search"}


class ThreadedSearchFakes:
    """SearchFakes on their own event loop thread, for a server running in a child process."""

    def __init__(self) -> None:
        self.fakes = SearchFakes()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> SearchFakes:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.fakes.start(), self._loop).result(10)
        return self.fakes

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.fakes.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()
