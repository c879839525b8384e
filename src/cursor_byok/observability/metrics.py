"""Prometheus metrics in a registry of their own (never the process-global one).

Feed it from four places:

- the server, once per RPC:          `metrics.observe_rpc(path, outcome)`
- the runner's `on_llm_call` hook:   `metrics.observe_llm_call(record)` (final records only)
- the runner's `on_run_end` hook:    `metrics.observe_run(summary)`
- the runner's `on_fallback` hook:   `metrics.observe_fallback(model, fallback)`
- the runner's `on_compaction` hook: `metrics.observe_compaction(summary)`

and serve `metrics.render()` at GET /metrics. Token and cost counters come from the LLM call
records only, so a run summary never counts its calls' tokens twice.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from ..store.api import LLMCallRecord

# No `*_created` series: one extra series per counter and histogram child, which says when this
# process first saw the label set; rate() and increase() never need it. (A process-wide switch
# of prometheus-client, read when the samples are collected.)
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus-client leaves it untyped

if TYPE_CHECKING:
    from ..transport.runtime.summary import CacheStats, CompactionSummary, RunSummary

PREFIX = "cursor_byok"

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 60.0)
LLM_DURATION_BUCKETS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 60.0, 120.0, 300.0)
RUN_DURATION_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)

TOKEN_KINDS = ("input", "output", "cache_read", "cache_write", "reasoning")
FINAL_STATUSES = {"committed": "ok", "failed": "error", "canceled": "canceled"}

# "/agent.v1.AgentService/Run" -> "agent.v1.AgentService/Run"; anything else is "other", so a
# scanner probing random paths cannot blow up the label set.
_RPC_PATH = re.compile(r"^/?([A-Za-z_][\w.]*\.[A-Za-z_]\w*/[A-Za-z_]\w*)$")
MAX_RPC_LABELS = 200
MAX_UNKNOWN_KINDS = 64
MAX_REMEMBERED_CALLS = 10_000
JOB_APIS = ("image", "search")  # the `api` of a priced server job's record (runtime/charges.py)


def is_summary_call(call_id: str) -> bool:
    """A compaction's summary call: its id is "{turn_id}:summary{n}" (loop/ids.py)."""
    return ":summary" in call_id


def rpc_label(path: str) -> str:
    m = _RPC_PATH.match(path)
    return m.group(1) if m else "other"


def cache_hit_ratio(input: int, cache_read: int, cache_write: int) -> float | None:
    """cache_read / (input + cache_read + cache_write); None when nothing was read or written.

    For logs and the dashboard. /metrics exports no ratio: a ratio since start says nothing
    about the last hour, so the PromQL in docs/operations.md derives it from the token counters
    over any window."""
    total = input + cache_read + cache_write
    return cache_read / total if total > 0 else None


class _ServerCacheCollector(Collector):
    """The runner's in-memory caches (kept states, client blobs, request bases), read from a
    callback at scrape time: how full they are and how often a lookup found what it wanted."""

    def __init__(self, stats: Callable[[], Iterable[CacheStats]]) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        entries = GaugeMetricFamily(
            f"{PREFIX}_server_cache_entries", "Entries held by a server cache", labels=["cache"]
        )
        size = GaugeMetricFamily(
            f"{PREFIX}_server_cache_bytes",
            "Bytes held by a server cache (stored form of what it keeps)",
            labels=["cache"],
        )
        lookups = CounterMetricFamily(
            f"{PREFIX}_server_cache_lookups",
            "Lookups in a server cache by result (hit, miss)",
            labels=["cache", "result"],
        )
        for cache in self._stats():
            entries.add_metric([cache.name], cache.entries)
            size.add_metric([cache.name], cache.bytes)
            lookups.add_metric([cache.name, "hit"], cache.hits)
            lookups.add_metric([cache.name, "miss"], cache.misses)
        yield entries
        yield size
        yield lookups

    def describe(self) -> Iterable[Metric]:
        return []


class Metrics:
    def __init__(self, active_runs: Callable[[], float] | None = None) -> None:
        """`active_runs`: optional callback (e.g. `lambda: runner.active_runs`) read at scrape
        time; without it the gauge follows `run_started()` / `run_finished()`."""
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._lock = threading.Lock()
        self._seen_calls: OrderedDict[str, None] = OrderedDict()
        self._rpc_labels: set[str] = set()

        self.rpc_requests = Counter(
            f"{PREFIX}_rpc_requests",
            "RPC requests by RPC and outcome (Connect code, or ok)",
            ["rpc", "outcome"],
            registry=r,
        )
        self.active_runs = Gauge(f"{PREFIX}_active_runs", "Agent runs in progress", registry=r)
        if active_runs is not None:
            self.active_runs.set_function(active_runs)
        self.runs = Counter(
            f"{PREFIX}_runs",
            "Finished agent runs by model, provider and outcome",
            ["provider", "model", "outcome"],
            registry=r,
        )
        self.run_duration = Histogram(
            f"{PREFIX}_run_duration_seconds",
            "Wall time of one agent run (one user turn, tool round trips included)",
            ["provider", "model"],
            buckets=RUN_DURATION_BUCKETS,
            registry=r,
        )
        self.llm_calls = Counter(
            f"{PREFIX}_llm_calls",
            "Finished upstream LLM calls by provider, upstream model and outcome",
            ["provider", "model", "outcome"],
            registry=r,
        )
        self.llm_ttft = Histogram(
            f"{PREFIX}_llm_ttft_seconds",
            "Time from sending an LLM request to its first streamed event",
            ["provider", "model"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.llm_duration = Histogram(
            f"{PREFIX}_llm_duration_seconds",
            "Duration of one upstream LLM call, request to final event",
            ["provider", "model"],
            buckets=LLM_DURATION_BUCKETS,
            registry=r,
        )
        self.llm_tokens = Counter(
            f"{PREFIX}_llm_tokens",
            "Tokens by provider, upstream model and kind "
            "(input excludes cache reads/writes; output includes reasoning)",
            ["provider", "model", "kind"],
            registry=r,
        )
        self.llm_cost = Counter(
            f"{PREFIX}_llm_cost_usd",
            "Cost in USD of upstream LLM calls: the costs stored with them, each priced once at "
            "the prices in force when it was made",
            ["provider", "model"],
            registry=r,
        )
        self.llm_unpriced = Counter(
            f"{PREFIX}_llm_unpriced_calls",
            "Finished LLM calls made while their model had no prices: not in llm_cost_usd",
            ["provider", "model"],
            registry=r,
        )
        self.llm_fallbacks = Counter(
            f"{PREFIX}_llm_fallbacks",
            "Model calls repeated on a fallback model after failing before their first output, "
            "by the configured model that failed and the fallback model tried",
            ["model", "fallback"],
            registry=r,
        )
        self.compactions = Counter(
            f"{PREFIX}_compactions",
            "Compactions of a conversation's history, by the run's model and why "
            "(threshold, overflow: the provider refused the request, requested: /summarize)",
            ["model", "reason"],
            registry=r,
        )
        self.compaction_tokens = Counter(
            f"{PREFIX}_compaction_tokens",
            "Estimated request tokens right before (when=before) and after (when=after) each "
            "compaction, summed, by the run's model",
            ["model", "when"],
            registry=r,
        )
        self.compaction_cost = Counter(
            f"{PREFIX}_compaction_cost_usd",
            "Cost in USD of the summary calls, by the model that wrote them (also counted in "
            "llm_cost_usd)",
            ["provider", "model"],
            registry=r,
        )
        self.unknown_events = Counter(
            f"{PREFIX}_unknown_client_events",
            "Client messages this server does not handle, by kind",
            ["kind"],
            registry=r,
        )
        self._unknown_kinds: set[str] = set()
        # Per person token, by its name (never its value): calls, tokens and cost of the calls
        # this process made under it. The month's spend across replicas is the dashboard's.
        self.token_name: Callable[[str], str | None] = lambda token_id: None
        self.token_llm_calls = Counter(
            f"{PREFIX}_token_llm_calls",
            "Finished upstream LLM calls made under a person token, by token name and outcome",
            ["token", "outcome"],
            registry=r,
        )
        self.token_tokens = Counter(
            f"{PREFIX}_token_llm_tokens",
            "Tokens of the LLM calls made under a person token, by token name and kind",
            ["token", "kind"],
            registry=r,
        )
        self.token_refusals = Counter(
            f"{PREFIX}_token_refusals",
            "Runs ended because a person token's limit refused a model call, by token and limit "
            "(models, budget, rate, revoked)",
            ["token", "limit"],
            registry=r,
        )
        self.token_cost = Counter(
            f"{PREFIX}_token_cost_usd",
            "Cost in USD of the LLM calls made under a person token, from the configured prices",
            ["token"],
            registry=r,
        )
        # The server's priced jobs for a tool call (runtime/charges.py): images made, searches a
        # priced backend answered. Records of their own (api "image" or "search"), never in
        # the llm_* series; a person's whole spend is token_cost_usd + token_job_cost_usd.
        self.job_charges = Counter(
            f"{PREFIX}_job_charges",
            "Finished priced server jobs (kind=image|search) by provider, model (the search "
            "backends tried) and outcome",
            ["kind", "provider", "model", "outcome"],
            registry=r,
        )
        self.job_cost = Counter(
            f"{PREFIX}_job_cost_usd",
            "Cost in USD of priced server jobs (price_per_image, price_per_search)",
            ["kind", "provider", "model"],
            registry=r,
        )
        self.token_job_charges = Counter(
            f"{PREFIX}_token_job_charges",
            "Finished priced server jobs of runs under a person token, by token name and kind",
            ["token", "kind"],
            registry=r,
        )
        self.token_job_cost = Counter(
            f"{PREFIX}_token_job_cost_usd",
            "Cost in USD of priced server jobs of runs under a person token, by token name and "
            "kind",
            ["token", "kind"],
            registry=r,
        )

    def bind_active_runs(self, active_runs: Callable[[], float]) -> None:
        """Read the active-runs gauge from a callback from now on (e.g. the runner's count)."""
        self.active_runs.set_function(active_runs)

    def bind_worker(self, index: int, count: int, pid: int) -> None:
        """Name the worker process answering (server.workers > 1): each scrape through the
        shared port reaches one worker and shows that worker's figures."""
        info = Gauge(
            f"{PREFIX}_worker",
            "The worker process answering this scrape (server.workers)",
            ["index", "count", "pid"],
            registry=self.registry,
        )
        info.labels(str(index), str(count), str(pid)).set(1)

    def bind_caches(self, stats: Callable[[], Iterable[CacheStats]]) -> None:
        """Export the runner's caches (`runner.cache_stats`), read at scrape time."""
        self.registry.register(_ServerCacheCollector(stats))

    def bind_database_size(self, size: Callable[[], float], max_mib: int) -> None:
        """The database's size (read at scrape time: PostgreSQL's last poll, SQLite's file)
        and its cap (`server.database_max_mib`; 0: none)."""
        used = Gauge(
            f"{PREFIX}_database_bytes",
            "Size of the database (PostgreSQL: its last poll of pg_database_size; SQLite: the "
            "file and its WAL)",
            registry=self.registry,
        )
        used.set_function(size)
        cap = Gauge(
            f"{PREFIX}_database_limit_bytes",
            "The database's size cap (server.database_max_mib); 0: none. At the cap new runs "
            "are refused, unavailable: storage full",
            registry=self.registry,
        )
        cap.set(max_mib << 20)

    # -- feeding -------------------------------------------------------------------------

    def observe_unknown_event(self, kind: str) -> None:
        """One client message of a kind the server does not handle (kinds are bounded: past
        MAX_UNKNOWN_KINDS distinct ones, the rest count as "other")."""
        with self._lock:
            if kind not in self._unknown_kinds:
                if len(self._unknown_kinds) >= MAX_UNKNOWN_KINDS:
                    kind = "other"
                else:
                    self._unknown_kinds.add(kind)
        self.unknown_events.labels(kind=kind).inc()

    def observe_rpc(self, path: str, outcome: str) -> None:
        label = rpc_label(path)
        with self._lock:
            if label not in self._rpc_labels:
                if len(self._rpc_labels) >= MAX_RPC_LABELS:
                    label = "other"
                else:
                    self._rpc_labels.add(label)
        self.rpc_requests.labels(rpc=label, outcome=outcome or "unknown").inc()

    def run_started(self) -> None:
        self.active_runs.inc()

    def run_finished(self) -> None:
        self.active_runs.dec()

    def observe_llm_call(self, record: LLMCallRecord) -> None:
        """Count one finished call. Records without a final status (planned, streaming) and
        records already counted (same call_id) are ignored."""
        outcome = FINAL_STATUSES.get(record.status)
        if outcome is None:
            return
        with self._lock:
            if record.call_id in self._seen_calls:
                return
            self._seen_calls[record.call_id] = None
            if len(self._seen_calls) > MAX_REMEMBERED_CALLS:
                self._seen_calls.popitem(last=False)
        provider, model = record.provider or "unknown", record.model or "unknown"
        if record.api in JOB_APIS:
            self._observe_job(record, outcome, provider, model)
            return
        self.llm_calls.labels(provider=provider, model=model, outcome=outcome).inc()
        if record.ttft_ms is not None:
            self.llm_ttft.labels(provider=provider, model=model).observe(record.ttft_ms / 1000)
        if record.duration_ms is not None:
            self.llm_duration.labels(provider=provider, model=model).observe(
                record.duration_ms / 1000
            )
        counts = {
            "input": record.input_tokens or 0,
            "output": record.output_tokens or 0,
            "cache_read": record.cache_read_tokens or 0,
            "cache_write": record.cache_write_tokens or 0,
            "reasoning": record.reasoning_tokens or 0,
        }
        for kind in TOKEN_KINDS:
            # Touch every kind so each series exists from the first call (rate() needs it).
            self.llm_tokens.labels(provider=provider, model=model, kind=kind).inc(counts[kind])
        cost = record.cost_usd
        self.llm_cost.labels(provider=provider, model=model).inc(
            cost if cost is not None and cost > 0 else 0.0
        )
        unpriced = self.llm_unpriced.labels(provider=provider, model=model)
        unpriced.inc(1 if cost is None else 0)  # touched: the series exists from the first call
        if record.token_id is not None:
            token = self.token_name(record.token_id) or "unknown"
            self.token_llm_calls.labels(token=token, outcome=outcome).inc()
            for kind in TOKEN_KINDS:
                self.token_tokens.labels(token=token, kind=kind).inc(counts[kind])
            self.token_cost.labels(token=token).inc(cost if cost is not None and cost > 0 else 0.0)
        if is_summary_call(record.call_id):
            self.compaction_cost.labels(provider=provider, model=model).inc(
                cost if cost is not None and cost > 0 else 0.0
            )

    def _observe_job(self, record: LLMCallRecord, outcome: str, provider: str, model: str) -> None:
        kind = record.api
        cost = record.cost_usd if record.cost_usd is not None and record.cost_usd > 0 else 0.0
        self.job_charges.labels(kind=kind, provider=provider, model=model, outcome=outcome).inc()
        self.job_cost.labels(kind=kind, provider=provider, model=model).inc(cost)
        if record.token_id is not None:
            token = self.token_name(record.token_id) or "unknown"
            self.token_job_charges.labels(token=token, kind=kind).inc()
            self.token_job_cost.labels(token=token, kind=kind).inc(cost)

    def observe_compaction(self, summary: CompactionSummary) -> None:
        model = summary.model or "unknown"
        self.compactions.labels(model=model, reason=summary.reason).inc()
        self.compaction_tokens.labels(model=model, when="before").inc(max(0, summary.tokens_before))
        self.compaction_tokens.labels(model=model, when="after").inc(max(0, summary.tokens_after))

    def observe_fallback(self, model: str, fallback: str) -> None:
        """One call that `model` failed before output, repeated on `fallback` (configured model
        ids: a bounded label set)."""
        self.llm_fallbacks.labels(model=model, fallback=fallback).inc()

    def observe_run(self, summary: RunSummary) -> None:
        provider = summary.provider or "unknown"
        model = summary.model or "unknown"
        self.runs.labels(provider=provider, model=model, outcome=summary.outcome or "unknown").inc()
        self.run_duration.labels(provider=provider, model=model).observe(
            max(0, summary.duration_ms) / 1000
        )
        if summary.token_id and summary.refused_by:
            token = self.token_name(summary.token_id) or "unknown"
            self.token_refusals.labels(token=token, limit=summary.refused_by).inc()

    # -- reading -------------------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
