"""The prices the model calls were made at, per model: what the dashboard shows as when each
model's prices changed (`Store.list_price_spans`, from `llm_calls.prices`, migration 0013)."""

from __future__ import annotations

import msgspec


class PriceSpan(msgspec.Struct, frozen=True, kw_only=True):
    """The calls to one provider and upstream model stored with one set of prices: `prices`
    as stored (JSON; None: unpriced), and the first and last time a call was made at them.
    `Store.list_price_spans` lists them per provider and model, oldest first."""

    provider: str
    model: str
    prices: str | None
    first_ms: int
    last_ms: int
    calls: int
