"""The dashboard: one self-contained HTML page plus the JSON it polls.

Routes the server mounts (behind the same auth as the RPCs):

    GET /dashboard                      -> dashboard_html()                text/html
    GET /dashboard/api/summary          -> await dashboard_json(store, cfg) application/json
    GET /dashboard/api/conversation?id= -> await conversation_json(...)     application/json

The page has no external resources (no CDN, no fonts): plain JS and canvas charts. It reads
the API relative to its own path, and sends `Authorization: Bearer <token>` when the user gave
a token (prompted after a 401, or in the URL fragment `#token=...`, which never reaches logs).
"""

from __future__ import annotations

import time
from functools import cache
from importlib import resources
from typing import Any

import msgspec

from ..config import Config
from ..store.api import ConversationOverview, LLMCallRecord, RunOutcomeRecord, Store
from .dashboard_rows import call_row, conversation_row, model_ids_of, price_span_row, run_row
from .dashboard_tokens import tokens_data
from .logs import secrets_of
from .metrics import cache_hit_ratio, is_summary_call

HTML_CONTENT_TYPE = "text/html; charset=utf-8"
JSON_CONTENT_TYPE = "application/json"
# Bucket widths for the time series: the smallest giving at most MAX_BUCKETS buckets.
BUCKET_SIZES_MS = (
    60_000,
    5 * 60_000,
    15 * 60_000,
    3_600_000,
    6 * 3_600_000,
    86_400_000,
    7 * 86_400_000,
)
MAX_BUCKETS = 60
MAX_LIMIT = 1000


SCRIPT_MARKER = b"<!-- dashboard_script.html -->"


@cache
def dashboard_html() -> bytes:
    """The page (read once from the package): dashboard.html with its script inlined, so the
    page loads nothing else (its CSP allows inline script only)."""
    files = resources.files("cursor_byok.observability")
    page = files.joinpath("dashboard.html").read_bytes()
    script = files.joinpath("dashboard_script.html").read_bytes()
    return page.replace(SCRIPT_MARKER, script.rstrip(b"\n"), 1)


def bucket_size(span_ms: int) -> int:
    for size in BUCKET_SIZES_MS:
        if span_ms // size < MAX_BUCKETS:
            return size
    return BUCKET_SIZES_MS[-1]


def _series(
    rows: list[dict[str, Any]], config: Config, spans: list[dict[str, Any]]
) -> dict[str, Any]:
    """Per provider/model, tokens and cost summed per time bucket (empty buckets are zeros),
    with the sets of prices its calls were made at (`spans`) and how many were unpriced."""
    if not rows:
        return {"bucket_ms": BUCKET_SIZES_MS[0], "start_ms": None, "models": []}
    times = [int(r["time_ms"]) for r in rows]
    size = bucket_size(max(times) - min(times))
    first, last = min(times) // size * size, max(times) // size * size
    # A span wider than the biggest bucket allows is cut to its newest buckets.
    first = max(first, last - size * (4 * MAX_BUCKETS - 1))
    starts = list(range(first, last + size, size))
    index = {t: i for i, t in enumerate(starts)}
    per_model: dict[tuple[str, str], list[dict[str, Any]]] = {}
    calls: dict[tuple[str, str], list[int]] = {}  # key -> [calls, unpriced calls]
    for r in rows:
        key = (r["provider"] or "unknown", r["model"] or "unknown")
        counts = calls.setdefault(key, [0, 0])
        counts[0] += 1
        counts[1] += 1 if r["unpriced"] else 0
        points = per_model.get(key)
        if points is None:
            points = per_model[key] = [
                {
                    "t": t,
                    "tokens": 0,
                    "input": 0,
                    "output": 0,
                    "cache_read": 0,
                    "cache_write": 0,
                    "cost_usd": 0.0,
                    "calls": 0,
                    "errors": 0,
                }
                for t in starts
            ]
        i = index.get(int(r["time_ms"]) // size * size)
        if i is None:
            continue
        p = points[i]
        for kind in ("input", "output", "cache_read", "cache_write"):
            n = r[f"{kind}_tokens"] or 0
            p[kind] += n
            p["tokens"] += n
        p["cost_usd"] += r["cost_usd"] or 0.0
        p["calls"] += 1
        if r["outcome"] == "error":
            p["errors"] += 1
    models = [
        {
            "key": f"{provider}/{model}",
            "provider": provider,
            "model": model,
            # Calls stored without a cost: unknown, not $0 (the page says so). "priced": some
            # of its calls have a cost, so the chart draws a cost line.
            "priced": calls[(provider, model)][1] < calls[(provider, model)][0],
            "unpriced_calls": calls[(provider, model)][1],
            "model_ids": model_ids_of(config, provider, model),
            "prices": [sp for sp in spans if (sp["provider"], sp["model"]) == (provider, model)],
            "points": points,
        }
        for (provider, model), points in sorted(per_model.items())
    ]
    return {"bucket_ms": size, "start_ms": first, "models": models}


def _totals(calls: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(int(r[key] or 0) for r in calls)

    inp, read, write = (
        total("input_tokens"),
        total("cache_read_tokens"),
        total("cache_write_tokens"),
    )
    ratio = cache_hit_ratio(inp, read, write)
    summaries = [r for r in calls if is_summary_call(str(r["call_id"]))]
    return {
        "runs": len(runs),
        "failed_runs": sum(1 for r in runs if r["failed"]),
        "calls": len(calls),
        "failed_calls": sum(1 for r in calls if r["outcome"] == "error"),
        "fallbacks": sum(1 for r in calls if r["fallback_of"]),
        "input_tokens": inp,
        "output_tokens": total("output_tokens"),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "reasoning_tokens": total("reasoning_tokens"),
        "cache_hit_ratio": None if ratio is None else round(ratio, 4),
        "cost_usd": sum(float(r["cost_usd"] or 0.0) for r in calls),
        "unpriced_calls": sum(1 for r in calls if r["unpriced"]),
        # Compactions: their summary calls (ids "…:summary{n}") and what those cost.
        "summary_calls": len(summaries),
        "summary_cost_usd": sum(float(r["cost_usd"] or 0.0) for r in summaries),
    }


def _limit(limit: int) -> int:
    return max(1, min(int(limit), MAX_LIMIT))


async def dashboard_data(
    store: Store, config: Config, *, limit: int = 100, viewer: str | None = None
) -> dict[str, Any]:
    """Recent runs (failed ones with their message), LLM calls and conversations, totals over
    those runs and calls, and per-model series. `viewer`: a person (AccessTokenRecord.person)
    who sees only their own: the conversations they own, the runs of those, the calls made
    under their tokens and their token (the latest `limit` of their own, filtered in the
    store's queries); None: the operator, who sees everything.

    Never contains a secret: records hold none, and error texts and titles are scrubbed again
    here."""
    limit = _limit(limit)
    secrets = secrets_of(config)
    if viewer is None:
        calls = list(await store.list_recent_llm_calls(limit))
        outcomes = list(await store.list_recent_run_outcomes(limit))
        conversations = list(await store.list_conversation_overviews(limit))
    else:
        calls, outcomes, conversations = await _own(store, viewer, limit)
    rows = [call_row(c, secrets) for c in calls]
    rows.sort(key=lambda r: int(r["time_ms"]), reverse=True)
    runs = [run_row(o, secrets) for o in outcomes]
    spans = [price_span_row(s) for s in await store.list_price_spans()]
    now_ms = int(time.time() * 1000)
    return {
        "generated_at_ms": now_ms,
        "limit": limit,
        "models": [
            {
                "id": m.id,
                "display_name": m.display_name,
                "provider": m.provider.name,
                "upstream_model": m.settings.model,
                "priced": m.prices is not None,
            }
            for m in config.models.values()
        ],
        "totals": _totals(rows, runs),
        "runs": runs,
        "conversations": [conversation_row(c, secrets) for c in conversations],
        "llm_calls": rows,
        "series": _series(rows, config, spans),
        # When each model's prices changed: per provider and upstream model, each set of
        # prices its calls were made at (None: unpriced), first and last use, oldest first.
        "price_changes": spans,
        "tokens": await tokens_data(store, now_ms, viewer),
    }


async def _own(
    store: Store, viewer: str, limit: int
) -> tuple[list[LLMCallRecord], list[RunOutcomeRecord], list[ConversationOverview]]:
    """A person's own calls, runs and conversations, newest first, at most `limit` of each,
    filtered in the store's queries: however much the others did since, a person sees their
    own latest `limit`."""
    calls = await store.list_recent_llm_calls(limit, person=viewer)
    outcomes = await store.list_recent_run_outcomes(limit, owner=viewer)
    owned = await store.list_conversation_overviews(limit, owner=viewer)
    return list(calls), list(outcomes), list(owned)


async def dashboard_json(
    store: Store, config: Config, *, limit: int = 100, viewer: str | None = None
) -> bytes:
    return msgspec.json.encode(await dashboard_data(store, config, limit=limit, viewer=viewer))


# How deep the drill-down follows helpers of helpers (server.subagent_max_depth is at most 8).
MAX_HELPER_DEPTH = 8


async def helper_tree(store: Store, conversation_id: str, depth: int = 0) -> list[dict[str, Any]]:
    """The helpers (Task children) a conversation started, each with its own tokens and cost
    (its LLM calls) and its own helpers, oldest first."""
    if depth >= MAX_HELPER_DEPTH:
        return []
    out: list[dict[str, Any]] = []
    for link in await store.list_subagent_links(conversation_id):
        child = link.child_conversation_id
        calls = await store.list_conversation_llm_calls(child)
        out.append(
            {
                "conversation_id": child,
                "parent_tool_call_id": link.parent_tool_call_id,
                "subagent_type": link.subagent_type,
                "depth": link.depth,
                "started_at_ms": link.created_at_ms,
                "llm_calls": len(calls),
                "input_tokens": sum(c.input_tokens or 0 for c in calls),
                "output_tokens": sum(c.output_tokens or 0 for c in calls),
                "cache_read_tokens": sum(c.cache_read_tokens or 0 for c in calls),
                "cost_usd": sum(c.cost_usd or 0.0 for c in calls),
                "helpers": await helper_tree(store, child, depth + 1),
            }
        )
    return out


async def conversation_data(
    store: Store,
    config: Config,
    conversation_id: str,
    *,
    limit: int = 200,
    viewer: str | None = None,
) -> dict[str, Any] | None:
    """One conversation for the drill-down: its overview, its runs and its LLM calls (newest
    first, at most `limit` of each). None when the store knows no such conversation, or when
    it is not `viewer`'s (a person sees only their own; None: the operator)."""
    limit = _limit(limit)
    overview = await store.conversation_overview(conversation_id)
    if overview is None or (viewer is not None and overview.owner_id != viewer):
        return None
    secrets = secrets_of(config)
    calls = await store.list_conversation_llm_calls(conversation_id, limit)
    outcomes = await store.list_conversation_run_outcomes(conversation_id, limit)
    rows = [call_row(c, secrets) for c in calls]
    rows.sort(key=lambda r: int(r["time_ms"]), reverse=True)
    return {
        "generated_at_ms": int(time.time() * 1000),
        "limit": limit,
        "conversation": conversation_row(overview, secrets),
        "runs": [run_row(o, secrets) for o in outcomes],
        "llm_calls": rows,
        "helpers": await helper_tree(store, conversation_id),
    }


async def conversation_json(
    store: Store,
    config: Config,
    conversation_id: str,
    *,
    limit: int = 200,
    viewer: str | None = None,
) -> bytes | None:
    data = await conversation_data(store, config, conversation_id, limit=limit, viewer=viewer)
    return None if data is None else msgspec.json.encode(data)
