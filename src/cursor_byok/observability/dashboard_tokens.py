"""The dashboard's tokens per person: each active token's limits and what it used this UTC
calendar month (the store's sums, so every replica's calls count). Names only: no secret, no
hash, no id."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..store.api import Store


def month_bounds(now_ms: int) -> tuple[int, int, str]:
    """[start, end) of the UTC calendar month of `now_ms`, and its name; the same window the
    runtime checks budgets over (transport/runtime/access.py `month_window`)."""
    now = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    end = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
    return int(start.timestamp() * 1000), int(end.timestamp() * 1000), f"{now:%Y-%m}"


async def tokens_data(store: Store, now_ms: int, viewer: str | None = None) -> dict[str, Any]:
    """`viewer`: a person's own view (their token alone); None: the operator's, every one."""
    start, end, month = month_bounds(now_ms)
    tokens = await store.list_access_tokens()
    if viewer is not None:
        tokens = tuple(t for t in tokens if t.person == viewer)
    usage = {u.token_id: u for u in await store.token_usage(start, end)}
    rows = []
    for token in tokens:
        used = usage.get(token.person)  # a person's use, across its rotations
        rows.append(
            {
                "name": token.name,
                "models": list(token.models),
                "budget_usd": token.budget_usd,
                "rpm": token.rpm,
                "created_at_ms": token.created_at_ms,
                "llm_calls": used.llm_calls if used else 0,
                "input_tokens": used.input_tokens if used else 0,
                "output_tokens": used.output_tokens if used else 0,
                "cost_usd": used.cost_usd if used else 0.0,
                "unpriced_calls": used.unpriced_calls if used else 0,
            }
        )
    return {"month": month, "tokens": rows}
