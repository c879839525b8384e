"""The model catalogue: prices and context windows from a maintained source, so that nobody
types them by hand.

Source: the `genai-prices` package (Pydantic's price list of LLM APIs, MIT), pinned in
pyproject.toml and installed with the server: its data ships inside the wheel and is read
from there, never downloaded at run time (its own `update_prices` is never called). A newer
list comes with a newer pin (docs/operations.md, "Model catalogue").

A model matches an entry only exactly, never by a pattern or a prefix: the catalogue's
provider (named by `[providers.X] catalogue`, else the one whose API address pattern matches
the provider's `base_url`) and the model's upstream name (or its declared `catalogue` name)
equal to an entry's id, or to a name the entry itself lists as an exact match. genai-prices
also matches by patterns ("starts with claude-2"); those are left out on purpose: a wrong
price is worse than none, which says so.

What an entry gives: the prices in force today (a scheduled change is taken at start), with
a long-context tier where the catalogue has one; the context window where it has one. It has
no output limits: `max_output_tokens` stays the TOML's (unset: the provider's default).
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import msgspec

from .models import Prices

if TYPE_CHECKING:
    from genai_prices.types import ModelInfo

PACKAGE = "genai-prices"


class CatalogueEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One model of the catalogue as this server uses it."""

    source: str  # the package and version it came from, e.g. "genai-prices 0.2.3"
    provider: str  # the catalogue's provider id
    model: str  # the catalogue's model id
    name: str | None = None
    prices: Prices | None = None
    context_window: int | None = None
    # What the catalogue says that `prices` leaves out (time-of-day prices, several tiers).
    note: str = ""

    @property
    def key(self) -> str:
        return f"{self.provider}/{self.model}"


@functools.cache
def source() -> str:
    return f"{PACKAGE} {importlib.metadata.version(PACKAGE)}"


def _equals(clause: Any) -> Iterator[str]:
    """The exact names a match clause lists (its `equals`, also inside `or`); never patterns."""
    from genai_prices.types import ClauseEquals, ClauseOr

    if isinstance(clause, ClauseEquals):
        yield clause.equals
    elif isinstance(clause, ClauseOr):
        for inner in clause.or_:
            yield from _equals(inner)


@functools.cache
def _index() -> tuple[dict[tuple[str, str], ModelInfo], tuple[tuple[str, str], ...]]:
    """(provider id, exact name) -> entry, and each provider's API address pattern. Built once
    per process, on first use (importing the data takes ~0.25 s; a lookup is a dict get)."""
    from genai_prices.data import providers

    index: dict[tuple[str, str], ModelInfo] = {}
    for provider in providers:
        for model in provider.models:
            index[(provider.id, model.id)] = model
            for name in _equals(model.match):
                index.setdefault((provider.id, name), model)
    patterns = tuple((p.id, p.api_pattern) for p in providers)
    return index, patterns


def provider_ids() -> tuple[str, ...]:
    return tuple(p for p, _ in _index()[1])


def provider_for(base_url: str) -> str | None:
    """The catalogue's provider whose API address pattern matches `base_url`, if one does."""
    for provider, pattern in _index()[1]:
        if re.match(pattern, base_url):
            return provider
    return None


def lookup(provider: str, name: str) -> CatalogueEntry | None:
    """The entry of `name` at `provider`, matched exactly (case aside, as the catalogue's own
    exact names are); None when the catalogue has no such model."""
    found = _index()[0].get((provider, name.lower())) or _index()[0].get((provider, name))
    if found is None:
        return None
    prices, note = _prices(found)
    return CatalogueEntry(
        source=source(),
        provider=provider,
        model=found.id,
        name=found.name,
        prices=prices,
        context_window=found.context_window,
        note=note,
    )


def _prices(model: ModelInfo) -> tuple[Prices | None, str]:
    from genai_prices.types import ModelPrice, TimeOfDateConstraint

    notes: list[str] = []
    if isinstance(model.prices, ModelPrice):
        price = model.prices
    elif any(isinstance(c.constraint, TimeOfDateConstraint) for c in model.prices):
        # Cheaper hours: one flat price cannot say them; the standard one is taken.
        price = model.prices[0].prices
        notes.append("its prices vary by time of day: the standard ones are used")
    else:
        price = model.get_prices(datetime.datetime.now(datetime.UTC))
    fields = {
        "input": getattr(price, "input_mtok", None),
        "output": getattr(price, "output_mtok", None),
        "cache_read": getattr(price, "cache_read_mtok", None),
        "cache_write": getattr(price, "cache_write_mtok", None),
    }
    if all(v is None for v in fields.values()):
        return None, "no token prices in the catalogue"
    base: dict[str, float] = {}
    tiers: dict[str, dict[int, float]] = {}
    for kind, value in fields.items():
        if value is None:
            continue
        if isinstance(value, Decimal):
            base[kind] = float(value)
            continue
        base[kind] = float(value.base)
        tiers[kind] = {t.start: float(t.price) for t in value.tiers}
    starts = {start for by_start in tiers.values() for start in by_start}
    if len(starts) == 1:
        (start,) = starts
        above = {k: tiers[k][start] if k in tiers else v for k, v in base.items()}
        tiered = msgspec.structs.replace(
            _flat(base), long_context_tokens=start, long_context=_flat(above)
        )
        return tiered, "; ".join(notes)
    if starts:
        notes.append("it has several price tiers by prompt length: the first one is used")
    return _flat(base), "; ".join(notes)


def _flat(per_kind: dict[str, float]) -> Prices:
    return Prices(
        input=per_kind.get("input", 0.0),
        output=per_kind.get("output", 0.0),
        cache_read=per_kind.get("cache_read", 0.0),
        cache_write=per_kind.get("cache_write", 0.0),
    )


__all__ = ["CatalogueEntry", "lookup", "provider_for", "provider_ids", "source"]
