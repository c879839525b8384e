"""What a model's prices and context window default to when its TOML does not say: the
catalogue's entry (llm/model_catalogue.py), matched exactly, or zero prices for a server on
this machine. The TOML always wins; each value says where it came from, for `cursor-byok
models` and the logs."""

from __future__ import annotations

import ipaddress
import urllib.parse

import msgspec

from .llm import model_catalogue
from .llm.model_catalogue import CatalogueEntry
from .llm.models import Prices

# Without the TOML or the catalogue saying otherwise (the window compaction plans for).
DEFAULT_CONTEXT_WINDOW = 128_000


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine's loopback interface only."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_local(base_url: str) -> bool:
    """A provider on this machine (llama-server, Ollama, vLLM on loopback): it bills nothing."""
    return is_loopback(urllib.parse.urlsplit(base_url).hostname or "")


class ModelDefaults(msgspec.Struct, frozen=True, kw_only=True):
    prices: Prices | None
    prices_source: str  # "config", "catalogue", "local" or "" (none: the model is unpriced)
    context_window: int
    context_source: str  # "config", "catalogue" or "default"
    entry: CatalogueEntry | None  # the matched catalogue entry, if any


class CatalogueError(ValueError):
    """A declared catalogue name or provider the catalogue does not have."""


def catalogue_entry(
    *, base_url: str, upstream: str, provider: str | None, name: str | None
) -> CatalogueEntry | None:
    """The entry a model matches: `name` (its TOML `catalogue`: "model" or "provider/model";
    "" for none) or else its upstream name, at `provider` (its provider's TOML `catalogue`;
    "" for none) or else the catalogue's provider whose API address matches `base_url`.
    Raises CatalogueError for a declared name or provider the catalogue does not have."""
    if name == "" or provider == "":
        return None
    if name is None and provider is None and is_local(base_url):
        return None  # a server on this machine: nothing to look up (and the data not loaded)
    known = model_catalogue.provider_ids()
    if provider is not None and provider not in known:
        raise CatalogueError(
            f"{provider!r} is not a provider of the catalogue ({model_catalogue.source()}); "
            f'it has {", ".join(known)}; catalogue = "" leaves it out'
        )
    wanted = upstream if name is None else name
    at = provider
    head, sep, rest = wanted.partition("/")
    if name is not None and sep and head in known:
        at, wanted = head, rest
    if at is None and not is_local(base_url):
        at = model_catalogue.provider_for(base_url)
    entry = model_catalogue.lookup(at, wanted) if at is not None else None
    if entry is None and name is not None:
        where = f"at provider {at!r}" if at else "(no catalogue provider for this base_url)"
        raise CatalogueError(
            f"{name!r} is not in the catalogue ({model_catalogue.source()}) {where}; names "
            'match exactly: write its id as the catalogue has it, "provider/model", or '
            'catalogue = "" and set prices and context_window here'
        )
    return entry


def model_defaults(
    *,
    base_url: str,
    upstream: str,
    provider_catalogue: str | None,
    catalogue: str | None,
    local: bool | None = None,
    prices: Prices | None,
    context_window: int | None,
) -> ModelDefaults:
    """The model's prices and window: the TOML's; else prices zero for a provider that bills
    nothing (`local`: its TOML's, else whether its base_url is loopback; a proxy on loopback
    to a paid API says `local = false`), the catalogue entry's, or none (unpriced); and the
    window the entry's, or DEFAULT_CONTEXT_WINDOW."""
    # Looked up even when the TOML sets both: `cursor-byok models` shows what it overrides.
    entry = catalogue_entry(
        base_url=base_url, upstream=upstream, provider=provider_catalogue, name=catalogue
    )
    if prices is not None:
        price, price_source = prices, "config"
    elif is_local(base_url) if local is None else local:
        price, price_source = Prices(), "local"
    elif entry is not None and entry.prices is not None:
        price, price_source = entry.prices, "catalogue"
    else:
        price, price_source = None, ""
    if context_window is not None:
        window, window_source = context_window, "config"
    elif entry is not None and entry.context_window:
        window, window_source = entry.context_window, "catalogue"
    else:
        window, window_source = DEFAULT_CONTEXT_WINDOW, "default"
    return ModelDefaults(
        prices=price,
        prices_source=price_source,
        context_window=window,
        context_source=window_source,
        entry=entry,
    )
