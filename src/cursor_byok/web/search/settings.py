"""Search backends as configured: native values the composition root builds from the TOML.

Keys arrive here already read from the environment; every `repr` leaves them out.
"""

from __future__ import annotations

import msgspec

from .provider import ProviderSearchSpec

__all__ = [
    "BRAVE_URL",
    "TAVILY_URL",
    "BackendSpec",
    "BraveSpec",
    "SearxngSpec",
    "TavilySpec",
    "WebSearchSettings",
]

# The documented endpoints (api-dashboard.search.brave.com/docs; help.tavily.com "Tavily
# Search API"); `url` in the configuration replaces them (a proxy, a test's fake).
BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
TAVILY_URL = "https://api.tavily.com/search"


class SearxngSpec(msgspec.Struct, frozen=True):
    name: str
    url: str  # the instance's base URL; the JSON API is GET {url}/search?q=...&format=json


class BraveSpec(msgspec.Struct, frozen=True):
    name: str
    api_key: str
    url: str = BRAVE_URL

    def __repr__(self) -> str:
        return f"BraveSpec(name={self.name!r}, url={self.url!r})"


class TavilySpec(msgspec.Struct, frozen=True):
    name: str
    api_key: str
    url: str = TAVILY_URL

    def __repr__(self) -> str:
        return f"TavilySpec(name={self.name!r}, url={self.url!r})"


BackendSpec = SearxngSpec | BraveSpec | TavilySpec | ProviderSearchSpec


class WebSearchSettings(msgspec.Struct, frozen=True):
    """`[web_search]`: the backends by name, the server-wide fallback order and each model's
    own order (`[models.X] web_search`)."""

    backends: dict[str, BackendSpec] = {}
    order: tuple[str, ...] = ()
    per_model: dict[str, tuple[str, ...]] = {}
    timeout_s: float = 15.0  # one backend attempt
    max_results: int = 8
    prices: dict[str, float] = {}  # USD per search, by backend name (price_per_search)

    @property
    def offered(self) -> bool:
        """Whether any model has a backend to search with: else WebSearch is not offered."""
        return bool(self.order) or any(self.per_model.values())

    def order_for(self, model_id: str) -> tuple[str, ...]:
        """The backends to try for a run of `model_id`, in order."""
        return self.per_model.get(model_id, self.order)
