"""Compaction settings: the server-wide threshold, a model's own, its compaction_model, and the
mistakes (reported with their full keys)."""

from __future__ import annotations

import pytest

from cursor_byok.config import ConfigError, parse_config

BASE = """
[server]
{server}

[providers.p]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[models.big]
provider = "p"
context_window = 200000
{big}

[models.cheap]
provider = "p"
"""


def config(server: str = "", big: str = "") -> str:
    return BASE.format(server=server, big=big)


def test_the_default_threshold_is_the_official_share() -> None:
    models = parse_config(config(), env={}).models
    assert models["big"].compaction_threshold == 0.9
    assert models["big"].compaction_model is None


def test_the_server_default_and_a_model_override() -> None:
    text = config(server="compaction_threshold = 0.8", big="compaction_threshold = 0.7")
    models = parse_config(text, env={}).models
    assert models["big"].compaction_threshold == 0.7
    assert models["cheap"].compaction_threshold == 0.8


def test_a_compaction_model_names_another_model() -> None:
    models = parse_config(config(big='compaction_model = "cheap"'), env={}).models
    assert models["big"].compaction_model == "cheap"


def test_mistakes_are_reported_with_their_keys() -> None:
    text = config(big='compaction_threshold = 1.5\ncompaction_model = "nope"')
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={}, path="c.toml")
    message = str(info.value)
    assert "models.big.compaction_threshold must be between 0.1 and 1.0" in message
    assert "models.big.compaction_model: 'nope' is not a model of this configuration" in message
