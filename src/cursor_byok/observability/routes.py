"""Wiring in one object: the runner hooks and the GET routes, ready for the server to mount.

    obs = Observability(config, store)
    services = RunnerServices(..., on_llm_call=obs.on_llm_call, on_run_end=obs.on_run_end,
                              outcome_row=obs.outcome_row, on_fallback=obs.on_fallback,
                              on_unknown_event=obs.metrics.observe_unknown_event)
    obs.metrics.bind_active_runs(lambda: runner.active_runs)
    ...
    # per request, after routing RPCs:
    obs.observe_rpc(path, outcome)                 # outcome: "ok" or the Connect code
    if method == "GET" and path in GET_ROUTES:
        if not (obs.is_public(path) or authorized):  -> 401
        response = await obs.get(path, query)      # HttpResponse | None
    ...
    await obs.aclose()                             # before the store closes

Hooks never raise into the runner: a failure is logged and swallowed. Each run's outcome is
stored (run_outcomes) for the dashboard: with the commit of the turn's answer (`outcome_row`
builds the row the runtime hands to that commit), else in the background at the run's end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from ..config import Config
from ..store.api import LLMCallRecord, RunOutcomeRecord, Store
from .dashboard import (
    HTML_CONTENT_TYPE,
    JSON_CONTENT_TYPE,
    conversation_json,
    dashboard_html,
    dashboard_json,
)
from .logs import RUN_LOGGER, log_run, secrets_of
from .metrics import Metrics
from .outcomes import outcome_record

if TYPE_CHECKING:
    from ..transport.runtime.summary import CompactionSummary, RunSummary

log = logging.getLogger("cursor_byok.observability")

METRICS_PATH = "/metrics"
DASHBOARD_PATHS = ("/dashboard", "/dashboard/")
SUMMARY_PATH = "/dashboard/api/summary"
CONVERSATION_PATH = "/dashboard/api/conversation"
ROOT_PATH = "/"
GET_ROUTES = (ROOT_PATH, METRICS_PATH, *DASHBOARD_PATHS, SUMMARY_PATH, CONVERSATION_PATH)
# What a person who opens the server's address in a browser reads.
ROOT_TEXT = (
    b"cursor-byok: this address serves Cursor's agent protocol to Cursor clients.\n"
    b"Dashboard: /dashboard    Metrics: /metrics    Health: /healthz\n"
)

# The page runs only its own inline script and may talk only to its own origin.
DASHBOARD_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
_COMMON_HEADERS = (("cache-control", "no-store"), ("x-content-type-options", "nosniff"))


@dataclass(frozen=True)
class HttpResponse:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = field(default=_COMMON_HEADERS)


class Observability:
    def __init__(self, config: Config, store: Store, metrics: Metrics | None = None) -> None:
        self.config = config
        self.store = store
        self.metrics = metrics or Metrics()
        self.run_log = logging.getLogger(RUN_LOGGER)
        self._secrets = secrets_of(config)
        self._saving: set[asyncio.Task[object]] = set()

    def bind_token_names(self, name_of: Callable[[str], str | None]) -> None:
        """How metrics name a person token's series (its name, never its value)."""
        self.metrics.token_name = name_of

    # -- runner hooks (RunnerServices.on_llm_call / on_run_end) ----------------------------

    def on_llm_call(self, record: LLMCallRecord) -> None:
        try:
            self.metrics.observe_llm_call(record)
        except Exception:
            log.exception("metrics: could not record LLM call %s", record.call_id)

    def on_fallback(self, model: str, fallback: str) -> None:
        try:
            self.metrics.observe_fallback(model, fallback)
        except Exception:
            log.exception("metrics: could not record a fallback from %s", model)

    def on_compaction(self, summary: CompactionSummary) -> None:
        try:
            self.metrics.observe_compaction(summary)
        except Exception:
            log.exception("metrics: could not record a compaction")

    def on_run_end(self, summary: RunSummary) -> None:
        try:
            self.metrics.observe_run(summary)
        except Exception:
            log.exception("metrics: could not record run %s", summary.request_id)
        try:
            token = None
            if summary.token_id:
                token = self.metrics.token_name(summary.token_id) or "unknown"
            log_run(summary, self.run_log, token)
        except Exception:
            log.exception("could not log run %s", summary.request_id)
        if summary.outcome_stored == summary.outcome:
            return  # stored with the commit of the turn's answer (outcome_row)
        try:
            self._save_outcome(summary)
        except Exception:
            log.exception("could not store the outcome of run %s", summary.request_id)

    def outcome_row(self, summary: RunSummary, finished_at_ms: int) -> RunOutcomeRecord:
        """The stored record of a run ending as `summary` says (RunnerServices.outcome_row)."""
        return outcome_record(summary, finished_at_ms, self._secrets)

    def _save_outcome(self, summary: RunSummary) -> None:
        record = outcome_record(summary, int(time.time() * 1000), self._secrets)
        task: asyncio.Task[object] = asyncio.get_running_loop().create_task(
            self.store.save_run_outcome(record)
        )
        self._saving.add(task)

        def done(t: asyncio.Task[object]) -> None:
            self._saving.discard(t)
            if not t.cancelled() and (exc := t.exception()) is not None:
                log.error("could not store the outcome of run %s: %s", record.request_id, exc)

        task.add_done_callback(done)

    async def aclose(self) -> None:
        """Wait for the run outcomes still being stored (call before the store closes)."""
        while self._saving:
            await asyncio.gather(*self._saving, return_exceptions=True)

    def observe_rpc(self, path: str, outcome: str) -> None:
        try:
            self.metrics.observe_rpc(path, outcome)
        except Exception:
            log.exception("metrics: could not record RPC %s", path)

    # -- GET routes ------------------------------------------------------------------------

    @staticmethod
    def handles(path: str) -> bool:
        return path in GET_ROUTES

    @staticmethod
    def is_public(path: str) -> bool:
        """The dashboard page holds no data (it fetches it with the token), so a browser can
        load it without a bearer header, and so can the pointer at /; /metrics and the summary
        API need the auth."""
        return path in DASHBOARD_PATHS or path == ROOT_PATH

    @staticmethod
    def is_personal(path: str) -> bool:
        """The dashboard's data, which a person's token may read too: their own part of it
        (`get(..., viewer=person)`); /metrics stays the operator's."""
        return path in (SUMMARY_PATH, CONVERSATION_PATH)

    async def get(
        self, path: str, query: str = "", viewer: str | None = None
    ) -> HttpResponse | None:
        """The response for one of GET_ROUTES, or None for any other path. `viewer`: the
        person whose own data the dashboard shows (None: the operator, everything)."""
        if path == ROOT_PATH:
            return HttpResponse(200, "text/plain; charset=utf-8", ROOT_TEXT)
        if path == METRICS_PATH:
            body, content_type = self.metrics.render()
            return HttpResponse(200, content_type, body)
        if path in DASHBOARD_PATHS:
            return HttpResponse(
                200,
                HTML_CONTENT_TYPE,
                dashboard_html(),
                (*_COMMON_HEADERS, ("content-security-policy", DASHBOARD_CSP)),
            )
        if path == SUMMARY_PATH:
            limit = 100
            values = parse_qs(query).get("limit")
            if values:
                try:
                    limit = int(values[0])
                except ValueError:
                    return HttpResponse(400, JSON_CONTENT_TYPE, b'{"error":"limit: not a number"}')
            body = await dashboard_json(self.store, self.config, limit=limit, viewer=viewer)
            return HttpResponse(200, JSON_CONTENT_TYPE, body)
        if path == CONVERSATION_PATH:
            return await self._conversation(query, viewer)
        return None

    async def _conversation(self, query: str, viewer: str | None) -> HttpResponse:
        values = parse_qs(query)
        ids = values.get("id")
        if not ids or not ids[0]:
            return HttpResponse(400, JSON_CONTENT_TYPE, b'{"error":"id: missing"}')
        limit = 200
        if values.get("limit"):
            try:
                limit = int(values["limit"][0])
            except ValueError:
                return HttpResponse(400, JSON_CONTENT_TYPE, b'{"error":"limit: not a number"}')
        body = await conversation_json(self.store, self.config, ids[0], limit=limit, viewer=viewer)
        if body is None:
            return HttpResponse(404, JSON_CONTENT_TYPE, b'{"error":"no such conversation"}')
        return HttpResponse(200, JSON_CONTENT_TYPE, body)
