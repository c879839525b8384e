"""The dashboard: one self-contained HTML page plus the JSON it polls.

Routes the server mounts (behind the same auth as the RPCs):

    GET /dashboard              -> dashboard_html()                 text/html; charset=utf-8
    GET /dashboard/api/summary  -> await dashboard_json(store, cfg)  application/json

The page has no external resources (no CDN, no fonts): plain JS and canvas charts. It reads
the API relative to its own path, and sends `Authorization: Bearer <token>` when the user gave
a token (prompted after a 401, or in the URL fragment `#token=...`, which never reaches logs).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import msgspec

from ..config import Config
from ..store.api import ConversationSummary, LLMCallRecord, Store
from .logs import redact_text, secrets_of
from .metrics import FINAL_STATUSES, cache_hit_ratio

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


@cache
def dashboard_html() -> bytes:
    """The page (read once from the package)."""
    return resources.files("cursor_byok.observability").joinpath("dashboard.html").read_bytes()


def _call_time(record: LLMCallRecord) -> int:
    return record.finished_at_ms or record.created_at_ms


def _outcome(record: LLMCallRecord) -> str:
    return FINAL_STATUSES.get(record.status, record.status)


def _cost(record: LLMCallRecord, config: Config) -> float | None:
    if record.cost_usd is not None:
        return record.cost_usd
    if record.status not in FINAL_STATUSES:
        return None
    for model in config.models.values():  # an older record: price it from the config
        if (
            model.prices is not None
            and model.provider.name == record.provider
            and model.settings.model == record.model
        ):
            p = model.prices
            return (
                (record.input_tokens or 0) * p.input
                + (record.output_tokens or 0) * p.output
                + (record.cache_read_tokens or 0) * p.cache_read
                + (record.cache_write_tokens or 0) * p.cache_write
            ) / 1_000_000
    return None


def _call_row(record: LLMCallRecord, config: Config, secrets: Sequence[str]) -> dict[str, Any]:
    inp = record.input_tokens
    read = record.cache_read_tokens
    write = record.cache_write_tokens
    ratio = cache_hit_ratio(inp or 0, read or 0, write or 0) if inp is not None else None
    return {
        "call_id": record.call_id,
        "time_ms": _call_time(record),
        "created_at_ms": record.created_at_ms,
        "conversation_id": record.conversation_id,
        "turn_id": record.turn_id,
        "provider": record.provider,
        "model": record.model,
        "api": record.api,
        "status": record.status,
        "outcome": _outcome(record),
        "ttft_ms": record.ttft_ms,
        "duration_ms": record.duration_ms,
        "input_tokens": inp,
        "output_tokens": record.output_tokens,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "reasoning_tokens": record.reasoning_tokens,
        "cache_hit_ratio": None if ratio is None else round(ratio, 4),
        "cost_usd": _cost(record, config),
        "error": redact_text(record.error, secrets) if record.error else None,
    }


def _conversation_row(c: ConversationSummary) -> dict[str, Any]:
    return {
        "id": c.conversation_id,
        "message_count": c.message_count,
        "version": c.version,
        "created_at_ms": c.created_at_ms,
        "updated_at_ms": c.updated_at_ms,
    }


def bucket_size(span_ms: int) -> int:
    for size in BUCKET_SIZES_MS:
        if span_ms // size < MAX_BUCKETS:
            return size
    return BUCKET_SIZES_MS[-1]


def _series(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per provider/model, tokens and cost summed per time bucket; empty buckets are zeros."""
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
    for r in rows:
        key = (r["provider"] or "unknown", r["model"] or "unknown")
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
        {"key": f"{provider}/{model}", "provider": provider, "model": model, "points": points}
        for (provider, model), points in sorted(per_model.items())
    ]
    return {"bucket_ms": size, "start_ms": first, "models": models}


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(int(r[key] or 0) for r in rows)

    inp, read, write = (
        total("input_tokens"),
        total("cache_read_tokens"),
        total("cache_write_tokens"),
    )
    ratio = cache_hit_ratio(inp, read, write)
    return {
        "calls": len(rows),
        "errors": sum(1 for r in rows if r["outcome"] == "error"),
        "input_tokens": inp,
        "output_tokens": total("output_tokens"),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "reasoning_tokens": total("reasoning_tokens"),
        "cache_hit_ratio": None if ratio is None else round(ratio, 4),
        "cost_usd": sum(float(r["cost_usd"] or 0.0) for r in rows),
    }


async def dashboard_data(store: Store, config: Config, *, limit: int = 100) -> dict[str, Any]:
    """Recent conversations, recent LLM calls, totals over those calls and per-model series.

    Never contains a secret: records hold none, and error texts are scrubbed again here."""
    limit = max(1, min(int(limit), 1000))
    secrets = secrets_of(config)
    calls = await store.list_recent_llm_calls(limit)
    conversations = await store.list_conversations(limit)
    rows = [_call_row(c, config, secrets) for c in calls]
    rows.sort(key=lambda r: int(r["time_ms"]), reverse=True)
    return {
        "generated_at_ms": int(time.time() * 1000),
        "limit": limit,
        "models": [
            {
                "id": m.id,
                "display_name": m.display_name,
                "provider": m.provider.name,
                "upstream_model": m.settings.model,
            }
            for m in config.models.values()
        ],
        "totals": _totals(rows),
        "conversations": [_conversation_row(c) for c in conversations],
        "llm_calls": rows,
        "series": _series(rows),
    }


async def dashboard_json(store: Store, config: Config, *, limit: int = 100) -> bytes:
    return msgspec.json.encode(await dashboard_data(store, config, limit=limit))
