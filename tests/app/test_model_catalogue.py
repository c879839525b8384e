"""The model catalogue (issue 26 point 3): a model's prices and context window default from the
pinned genai-prices package's entry for its (provider, upstream name), or a declared name,
matched exactly and never by a pattern; the TOML overrides both; a server on loopback costs $0
("local"); it works with no network at all; and the starter's example models all match."""

from __future__ import annotations

import subprocess
import sys
import time
from textwrap import dedent

import pytest

from cursor_byok.config import ConfigError, parse_config
from cursor_byok.llm import model_catalogue
from cursor_byok.llm.models import Model, Prices
from cursor_byok.llm.types import Usage
from cursor_byok.starter_config import starter_config, uncomment_examples

PROVIDERS = """
[providers.anthropic]
api = "anthropic"
api_key = "sk-ant-test"

[providers.openai]
api = "openai-responses"
api_key = "sk-test"

[providers.router]
api = "openai-chat"
base_url = "https://openrouter.ai/api/v1"
api_key = "sk-or-test"

[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:8080/v1"
"""


def models(text: str) -> dict[str, Model]:
    return dict(parse_config(PROVIDERS + dedent(text), env={}).models)


def test_the_starter_models_all_match_with_prices_and_windows() -> None:
    """Coverage: every example of `cursor-byok init`, enabled, has the catalogue's prices and
    window, and `init` writes them beside each example."""
    env = {"OPENAI_API_KEY": "a", "ANTHROPIC_API_KEY": "b", "GEMINI_API_KEY": "c"}
    env |= {"BRAVE_API_KEY": "d", "TAVILY_API_KEY": "e"}
    config = parse_config(uncomment_examples(starter_config()), env=env)
    expected = {
        "gpt-5": ("openai/gpt-5", 400_000, 1.25, 10.0),
        "claude-sonnet": ("anthropic/claude-sonnet-4-5", 200_000, 3.0, 15.0),
        "gemini-flash": ("google/gemini-2.5-flash", 1_048_576, 0.3, 2.5),
    }
    for model_id, (key, window, inp, out) in expected.items():
        m = config.models[model_id]
        assert m.catalogue == f"{key} ({model_catalogue.source()})", model_id
        assert (m.context_window, m.context_source) == (window, "catalogue")
        assert m.prices is not None and (m.prices.input, m.prices.output) == (inp, out)
        assert m.prices_source == "catalogue"
        assert f"Catalogue defaults ({model_catalogue.source()}, {key})" in starter_config()
    local = config.models["local"]
    assert (local.prices, local.prices_source, local.catalogue) == (Prices(), "local", "")
    assert (local.context_window, local.context_source) == (8192, "config")
    # Anthropic's long-context tier comes along: a prompt over 200k tokens pays its prices.
    claude = config.models["claude-sonnet"].prices
    assert claude is not None and claude.long_context is not None
    assert claude.long_context_tokens == 200_000
    assert claude.cost(Usage(input=100_000, output=1_000)) == pytest.approx(0.3 + 0.015)
    assert claude.cost(Usage(input=150_000, cache_read=60_000, output=1_000)) == pytest.approx(
        150_000 * 6e-6 + 60_000 * 0.6e-6 + 1_000 * 22.5e-6
    )


def test_matches_are_exact_never_by_pattern() -> None:
    """genai-prices would price a dated Anthropic name by its prefix; here it is not in the
    catalogue until the model declares the name it has there."""
    found = models(
        """
        [models.dated]
        provider = "anthropic"
        model = "claude-sonnet-4-5-20250929"

        [models.declared]
        provider = "anthropic"
        model = "claude-sonnet-4-5-20250929"
        catalogue = "claude-sonnet-4-5"

        [models.routed]
        provider = "router"
        model = "anthropic/claude-sonnet-4.5"
        """
    )
    dated, declared, routed = (found[k] for k in ("dated", "declared", "routed"))
    assert (dated.catalogue, dated.prices, dated.prices_source) == ("", None, "")
    assert (dated.context_window, dated.context_source) == (128_000, "default")
    assert declared.catalogue.startswith("anthropic/claude-sonnet-4-5 (")
    assert declared.prices_source == "catalogue"
    # The provider found by its base_url (OpenRouter's address), the name exact.
    assert routed.catalogue.startswith("openrouter/anthropic/claude-sonnet-4.5 (")


def test_the_toml_overrides_the_catalogue_and_can_leave_it_out() -> None:
    found = models(
        """
        [models.mine]
        provider = "openai"
        model = "gpt-5"
        prices = { input = 1.0, output = 2.0 }
        context_window = 1000

        [models.half]
        provider = "openai"
        model = "gpt-5"
        prices = { input = 1.0 }

        [models.none]
        provider = "openai"
        model = "gpt-5"
        catalogue = ""
        """
    )
    mine, half, none = (found[k] for k in ("mine", "half", "none"))
    assert mine.prices == Prices(input=1.0, output=2.0) and mine.prices_source == "config"
    assert (mine.context_window, mine.context_source) == (1000, "config")
    assert mine.catalogue.startswith("openai/gpt-5 (")  # shown
    assert half.prices == Prices(input=1.0) and half.context_source == "catalogue"
    assert (none.catalogue, none.prices, none.context_window) == ("", None, 128_000)


def test_a_declared_name_or_provider_the_catalogue_lacks_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        models(
            """
            [models.typo]
            provider = "anthropic"
            model = "x"
            catalogue = "claude-sonet-4-5"
            """
        )
    assert "models.typo.catalogue: 'claude-sonet-4-5' is not in the catalogue" in str(caught.value)
    assert "at provider 'anthropic'" in str(caught.value)
    text = PROVIDERS.replace('api_key = "sk-test"', 'api_key = "sk-test"\ncatalogue = "opnai"')
    with pytest.raises(ConfigError, match="'opnai' is not a provider of the catalogue"):
        parse_config(text + '[models.g]\nprovider = "openai"\nmodel = "gpt-5"\n', env={})


def test_a_lookup_is_fast_once_loaded() -> None:
    model_catalogue.lookup("openai", "gpt-5")  # loads the data once per process
    n = 2_000
    started = time.perf_counter()
    for _ in range(n):
        model_catalogue.lookup("anthropic", "claude-sonnet-4-5")
    per_lookup = (time.perf_counter() - started) / n
    assert per_lookup < 0.001, per_lookup  # ~13 µs measured on a 2-core machine


def test_it_works_with_no_network_at_all() -> None:
    """In a fresh interpreter whose sockets all fail: the data is inside the package."""
    script = dedent(
        """
        import socket
        def refuse(*args, **kwargs):
            raise OSError("no network in this test")
        class NoNetwork(socket.socket):
            def connect(self, *args, **kwargs):
                refuse()
            connect_ex = connect
        socket.socket = NoNetwork
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from cursor_byok.llm import model_catalogue
        entry = model_catalogue.lookup("openai", "gpt-5")
        print(entry.prices.input, entry.context_window)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1.25", "400000"]


def test_a_local_server_never_loads_the_catalogue() -> None:
    """Loopback only: zero prices, "local", and the data (~13 MB resident) never imported."""
    script = dedent(
        """
        import sys
        from cursor_byok.config import parse_config
        config = parse_config(
            '[providers.l]\\napi = "openai-chat"\\nbase_url = "http://127.0.0.1:8080/v1"\\n'
            '[models.m]\\nprovider = "l"\\n', env={}
        )
        m = config.models["m"]
        print(m.prices_source, m.context_source, "genai_prices.data" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["local", "default", "False"]
