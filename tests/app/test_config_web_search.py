"""[web_search] in the configuration (issue 15, points 4 and 6): the agreed shape becomes the
backends, the server-wide order and each model's order; keys come from the environment and
never show in a repr; every mistake (unknown kind, an unknown backend in a list, a missing
url or key variable, bad bounds, a misspelt key) is reported at once with its full key."""

from __future__ import annotations

import pytest

from cursor_byok.config import ConfigError, parse_config
from cursor_byok.llm.native_search import search_unsupported
from cursor_byok.observability.logs import secrets_of
from cursor_byok.web.search.settings import (
    BRAVE_URL,
    TAVILY_URL,
    BraveSpec,
    SearxngSpec,
    TavilySpec,
)

PROVIDER = """
[providers.p]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"
"""
KEY = "brave-config-PLANTED-1234567890"
GOOD = (
    PROVIDER
    + """
[models.a]
provider = "p"
web_search = ["tav", "searx"]

[models.b]
provider = "p"

[web_search]
backends = ["searx", "brave"]
timeout_s = 7
max_results = 5

[web_search.backend.searx]
kind = "searxng"
url = "http://127.0.0.1:8888/"

[web_search.backend.brave]
kind = "brave"
api_key_env = "BRAVE_API_KEY"

[web_search.backend.tav]
kind = "tavily"
api_key_env = "TAVILY_API_KEY"
url = "http://127.0.0.1:9999/search"
"""
)


def test_the_agreed_shape_gives_backends_and_orders() -> None:
    config = parse_config(GOOD, env={"BRAVE_API_KEY": KEY, "TAVILY_API_KEY": "tvly-k-1234567"})
    ws = config.web_search
    assert ws.backends == {
        "searx": SearxngSpec(name="searx", url="http://127.0.0.1:8888"),
        "brave": BraveSpec(name="brave", api_key=KEY, url=BRAVE_URL),
        "tav": TavilySpec(name="tav", api_key="tvly-k-1234567", url="http://127.0.0.1:9999/search"),
    }
    assert ws.order == ("searx", "brave") and ws.timeout_s == 7 and ws.max_results == 5
    assert ws.order_for("a") == ("tav", "searx") and ws.order_for("b") == ("searx", "brave")
    assert ws.offered
    assert KEY not in repr(ws) and KEY not in repr(config)
    assert KEY in secrets_of(config)  # redacted from every log line
    assert TAVILY_URL.startswith("https://api.tavily.com")


def test_no_table_or_an_empty_list_offers_no_search() -> None:
    assert not parse_config(PROVIDER, env={}).web_search.offered
    defined_only = PROVIDER + '[web_search.backend.s]\nkind = "searxng"\nurl = "http://h"\n'
    assert not parse_config(defined_only, env={}).web_search.offered
    # A model's own list is enough: WebSearch is offered (the others' searches fail clearly).
    per_model = defined_only + '[models.a]\nprovider = "p"\nweb_search = ["s"]\n'
    assert parse_config(per_model, env={}).web_search.offered


BAD = (
    PROVIDER
    + """
[models.a]
provider = "p"
web_search = ["nope"]

[models.b]
provider = "p"
web_search = []

[web_search]
backends = ["searx", "ghost", "searx"]
timeout_s = 0
max_results = 50

[web_search.backend.searx]
kind = "searxng"

[web_search.backend.bing]
kind = "bing"

[web_search.backend.brave]
kind = "brave"

[web_search.backend.tav]
kind = "tavily"
api_key_env = "UNSET_TAVILY_KEY"

[web_search.backend.ftp]
kind = "searxng"
url = "ftp://h"

[web_search.backend.typo]
kind = "searxng"
urll = "http://h"

[web_search.backend.mixed]
kind = "brave"
api_key_env = "X"
model = "claude-sonnet-4-5"

[web_search.backend.chat]
kind = "provider"
provider = "p"
model = "gpt-5"

[web_search.backend.keyed]
kind = "provider"
provider = "p"
model = "m"
url = "http://h"
"""
)


def test_every_mistake_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BAD, env={}, path="c.toml")
    assert info.value.lines() == [
        "c.toml: web_search.backend.typo.urll: unknown key; did you mean url?",
        "c.toml: web_search.timeout_s must be between 0 and 600 seconds",
        "c.toml: web_search.max_results must be 1-20",
        "c.toml: web_search.backend.searx.url: a searxng backend needs its instance's URL",
        "c.toml: web_search.backend.bing.kind: unknown kind 'bing'; use one of "
        "['searxng', 'brave', 'tavily', 'provider']",
        "c.toml: web_search.backend.brave.api_key_env: a brave backend needs the variable "
        "holding its key",
        "c.toml: web_search.backend.tav.api_key_env: environment variable UNSET_TAVILY_KEY is "
        "not set",
        "c.toml: web_search.backend.ftp.url must start with http:// or https://",
        "c.toml: web_search.backend.typo.url: a searxng backend needs its instance's URL",
        "c.toml: web_search.backend.mixed: provider and model belong to a backend of kind "
        "'provider'",
        "c.toml: web_search.backend.chat.provider: 'p' cannot search: "
        + search_unsupported("openai-chat"),
        "c.toml: web_search.backend.keyed: url and api_key_env do not belong to a backend of "
        "kind 'provider' (it uses the provider's own)",
        "c.toml: web_search.backends: unknown search backend(s) ['ghost'] "
        "(web_search.backend: bing, brave, chat, ftp, keyed, mixed, searx, tav, typo)",
        "c.toml: web_search.backends: a backend is listed twice",
        "c.toml: models.a.web_search: unknown search backend(s) ['nope'] "
        "(web_search.backend: bing, brave, chat, ftp, keyed, mixed, searx, tav, typo)",
        "c.toml: models.b.web_search: name at least one backend (or leave the key out)",
    ]
