"""The web tables of the configuration: [web_search] with its backends, [web_fetch] and
[image_generation], their Structs and the checks of their values (config.py reads the file and
calls these in its table order, so every mistake is still reported at once)."""

from __future__ import annotations

import difflib
import ipaddress
import math
from collections.abc import Mapping
from typing import Any

import msgspec

from .config_shape import key_path
from .llm.native_search import search_unsupported
from .llm.settings import ProviderSettings
from .web.page_text import DEFAULT_MAX_TEXT_CHARS
from .web.search.provider import ProviderSearchSpec
from .web.search.settings import (
    BRAVE_URL,
    TAVILY_URL,
    BackendSpec,
    BraveSpec,
    SearxngSpec,
    TavilySpec,
    WebSearchSettings,
)

SEARCH_KINDS = ("searxng", "brave", "tavily", "provider")
KEYED_SEARCH_URLS = {"brave": BRAVE_URL, "tavily": TAVILY_URL}


class SearchBackendConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    kind: str  # one of SEARCH_KINDS
    url: str | None = None  # searxng: the instance; brave, tavily: replaces the API's URL
    api_key_env: str | None = None  # brave, tavily: the variable holding the key
    provider: str | None = None  # provider: a [providers.NAME]
    model: str | None = None  # provider: the upstream model of the search-only call
    # USD per search this backend answers, charged to the person token of the run (and shown
    # with the model calls); None: free (a SearXNG of your own, or a plan paid per month).
    price_per_search: float | None = None


class WebSearchConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    backends: list[str] = []  # the ordered fallback list; empty: WebSearch is not offered
    timeout_s: float = 15.0  # one backend attempt
    max_results: int = 8
    backend: dict[str, SearchBackendConfig] = {}


class WebFetchConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """[web_fetch]: WebFetch's limits, and the server's own fetch for clients that cannot."""

    # Fetch on the server when the client cannot (off: a team server must not reach into its
    # own network for the model; even on, non-public addresses are refused).
    server_side: bool = False
    max_bytes: int = 2_000_000  # of one page fetched by the server (its body, decoded)
    timeout_s: float = 20.0  # one server fetch, redirects included
    max_redirects: int = 5
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS  # the page text the model reads
    # HTML to text runs in worker processes (web/convert.py), each conversion bounded:
    convert_max_bytes: int = 4_000_000  # larger pages are refused, saying so
    convert_timeout_s: float = 5.0  # the worker is killed at this deadline
    convert_workers: int = 2  # processes at most, started at the first page
    convert_memory_mb: int = 1024  # each worker's address space
    # CIDRs the server-side fetch may reach although not public (an intranet's docs host).
    allowed_networks: list[str] = []


class ImageGenerationConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """[image_generation]: where GenerateImage's images are made; absent, it is not offered."""

    provider: str  # a [providers.NAME] whose base_url serves /images/generations (OpenAI's)
    model: str
    timeout_s: float = 120.0
    extra_body: dict[str, Any] = {}  # merged into the request (quality, response_format...)
    # USD per image made, charged to the person token of the run; None: not counted.
    price_per_image: float | None = None


def _search_backend(
    name: str,
    b: SearchBackendConfig,
    env: Mapping[str, str],
    errors: list[str],
    providers: Mapping[str, ProviderSettings],
    raw_providers: Mapping[str, object],
    broken: frozenset[str],
) -> BackendSpec | None:
    key = key_path("web_search.backend", name)
    if b.kind not in SEARCH_KINDS:
        errors.append(f"{key}.kind: unknown kind {b.kind!r}; use one of {list(SEARCH_KINDS)}")
        return None
    if b.kind == "provider":
        if b.url is not None or b.api_key_env is not None:
            errors.append(
                f"{key}: url and api_key_env do not belong to a backend of kind 'provider' "
                "(it uses the provider's own)"
            )
            return None
        fields = ProviderSearchFields(provider=b.provider, model=b.model)
        spec = provider_search_spec(key, name, fields, providers, raw_providers, broken)
        if isinstance(spec, list):
            errors.extend(spec)
            return None
        return spec
    if b.provider is not None or b.model is not None:
        errors.append(f"{key}: provider and model belong to a backend of kind 'provider'")
        return None
    if b.url is not None and not b.url.startswith(("http://", "https://")):
        errors.append(f"{key}.url must start with http:// or https://")
        return None
    if b.kind == "searxng":
        if not b.url:
            errors.append(f"{key}.url: a searxng backend needs its instance's URL")
            return None
        return SearxngSpec(name=name, url=b.url.rstrip("/"))
    if not b.api_key_env:
        errors.append(f"{key}.api_key_env: a {b.kind} backend needs the variable holding its key")
        return None
    api_key = env.get(b.api_key_env)
    if not api_key:
        errors.append(f"{key}.api_key_env: environment variable {b.api_key_env} is not set")
        return None
    url = b.url or KEYED_SEARCH_URLS[b.kind]
    if b.kind == "brave":
        return BraveSpec(name=name, api_key=api_key, url=url)
    return TavilySpec(name=name, api_key=api_key, url=url)


def _search_order(
    where: str, names: list[str], known: Mapping[str, object], errors: list[str]
) -> tuple[str, ...]:
    unknown = [n for n in names if n not in known]
    if unknown:
        listed = ", ".join(sorted(known)) or "none configured"
        errors.append(
            f"{where}: unknown search backend(s) {unknown} (web_search.backend: {listed})"
        )
    if len(set(names)) != len(names):
        errors.append(f"{where}: a backend is listed twice")
    return tuple(names)


def web_search_settings(
    ws: WebSearchConfig,
    model_lists: Mapping[str, list[str] | None],
    raw_providers: Mapping[str, object],
    env: Mapping[str, str],
    errors: list[str],
    providers: Mapping[str, ProviderSettings],
    broken: frozenset[str],
) -> WebSearchSettings:
    """[web_search] and each model's `web_search` list (`model_lists`, by model id), checked
    against each other. `raw_providers` is every [providers] table (for the did-you-mean)."""
    if not 0 < ws.timeout_s <= 600:
        errors.append("web_search.timeout_s must be between 0 and 600 seconds")
    if not 1 <= ws.max_results <= 20:
        errors.append("web_search.max_results must be 1-20")
    specs: dict[str, BackendSpec] = {}
    prices: dict[str, float] = {}
    for name, b in ws.backend.items():
        if b.price_per_search is not None:
            where = f"{key_path('web_search.backend', name)}.price_per_search"
            if _price_error(where, b.price_per_search, errors):
                prices[name] = b.price_per_search
        spec = _search_backend(name, b, env, errors, providers, raw_providers, broken)
        if spec is not None:
            specs[name] = spec
    order = _search_order("web_search.backends", ws.backends, ws.backend, errors)
    per_model: dict[str, tuple[str, ...]] = {}
    for model_id, names in model_lists.items():
        if names is None:
            continue
        where = f"{key_path('models', model_id)}.web_search"
        if not names:
            errors.append(f"{where}: name at least one backend (or leave the key out)")
        per_model[model_id] = _search_order(where, names, ws.backend, errors)
    return WebSearchSettings(
        backends=specs,
        order=order,
        per_model=per_model,
        timeout_s=ws.timeout_s,
        max_results=ws.max_results,
        prices=prices,
    )


def _price_error(where: str, price: float, errors: list[str]) -> bool:
    """Whether `price` (USD) is a usable one; its mistake goes to `errors` when not."""
    if not (math.isfinite(price) and 0 <= price <= 1000):
        errors.append(f"{where} must be a number of dollars from 0 to 1000")
        return False
    return True


def _convert_errors(fetch: WebFetchConfig) -> list[str]:
    """[web_fetch]'s page conversion and address settings."""
    errors: list[str] = []
    if not 1024 <= fetch.convert_max_bytes <= 100_000_000:
        errors.append("web_fetch.convert_max_bytes must be 1024-100000000")
    if not 0.1 <= fetch.convert_timeout_s <= 600:  # also refuses nan
        errors.append("web_fetch.convert_timeout_s must be between 0.1 and 600 seconds")
    if not 1 <= fetch.convert_workers <= 64:
        errors.append("web_fetch.convert_workers must be 1-64")
    if not (fetch.convert_memory_mb == 0 or 128 <= fetch.convert_memory_mb <= 65536):
        errors.append("web_fetch.convert_memory_mb must be 128-65536 (0: no limit)")
    for network in fetch.allowed_networks:
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            errors.append(f"web_fetch.allowed_networks: {network!r} is not a CIDR (10.0.0.0/8)")
    return errors


def web_errors(
    fetch: WebFetchConfig,
    image: ImageGenerationConfig | None,
    raw_providers: Mapping[str, object],
    providers: Mapping[str, ProviderSettings],
    broken: set[str],
) -> list[str]:
    """The mistakes of [web_fetch] and [image_generation]."""
    errors: list[str] = []
    if not 1024 <= fetch.max_bytes <= 100_000_000:
        errors.append("web_fetch.max_bytes must be 1024-100000000")
    if not 0 < fetch.timeout_s <= 600:
        errors.append("web_fetch.timeout_s must be between 0 and 600 seconds")
    if not 0 <= fetch.max_redirects <= 20:
        errors.append("web_fetch.max_redirects must be 0-20")
    if not 1000 <= fetch.max_text_chars <= 10_000_000:
        errors.append("web_fetch.max_text_chars must be 1000-10000000")
    errors.extend(_convert_errors(fetch))
    if image is None:
        return errors
    if image.provider not in providers and image.provider not in broken:
        errors.append(
            f"image_generation.provider: {unknown_provider(image.provider, raw_providers)}"
        )
    elif image.provider in providers and providers[image.provider].api not in (
        "openai-chat",
        "openai-responses",
    ):
        errors.append(
            f"image_generation.provider: {image.provider!r} is an "
            f"{providers[image.provider].api} provider; images need an OpenAI-compatible one "
            "(api openai-chat or openai-responses) whose base_url serves /images/generations"
        )
    if not image.model.strip():
        errors.append("image_generation.model must not be empty")
    if not 0 < image.timeout_s <= 3600:
        errors.append("image_generation.timeout_s must be between 0 and 3600 seconds")
    if image.price_per_image is not None:
        _price_error("image_generation.price_per_image", image.price_per_image, errors)
    return errors


def unknown_provider(name: str, known: Mapping[str, object]) -> str:
    """The mistake of naming a provider no [providers] table defines, with a did-you-mean."""
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(sorted(known)) or "none configured"
    return f"unknown provider {name!r} (providers: {listed}){hint}"


# -- [web_search.backend.NAME] kind = "provider": a provider's own search (issue 15, point 4) --


class ProviderSearchFields(msgspec.Struct, frozen=True, kw_only=True):
    """The keys a `kind = "provider"` search backend table adds (the backend table's Struct
    takes them: inherit it or copy the two fields)."""

    provider: str | None = None  # a [providers.NAME] whose api has a search of its own
    model: str | None = None  # the upstream model id the search call asks for


def provider_search_spec(
    key: str,
    name: str,
    fields: ProviderSearchFields,
    providers: Mapping[str, ProviderSettings],
    configured: Mapping[str, object],
    broken: set[str] | frozenset[str] = frozenset(),
) -> ProviderSearchSpec | list[str]:
    """The backend `name` (table `key`) resolved against the loaded `providers`, or its
    mistakes. `configured` is every [providers] table (for the did-you-mean hint); a provider
    in `broken` had its own mistake reported already, so naming it is not a second one."""
    errors: list[str] = []
    provider = providers.get(fields.provider) if fields.provider else None
    if not fields.provider:
        errors.append(
            f'{key}.provider is required for kind = "provider": a [providers.NAME] whose api '
            "is anthropic, openai-responses or gemini"
        )
    elif provider is None and fields.provider not in broken:
        errors.append(f"{key}.provider: {unknown_provider(fields.provider, configured)}")
    elif provider is not None and (why := search_unsupported(provider.api)) is not None:
        errors.append(f"{key}.provider: {fields.provider!r} cannot search: {why}")
    if not (fields.model or "").strip():
        errors.append(
            f'{key}.model is required for kind = "provider": the upstream model id the '
            "search call uses (e.g. claude-sonnet-4-5, gpt-5-mini, gemini-2.5-flash)"
        )
    if errors or provider is None or fields.model is None:
        return errors
    return ProviderSearchSpec(name=name, provider=provider, model=fields.model.strip())
