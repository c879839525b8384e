"""`fallbacks` of a model in the configuration: resolved to model ids at load, and every
mistake named with its key."""

from __future__ import annotations

import pytest

from cursor_byok.config import ConfigError, parse_config

BASE = """
[server]
{server}

[providers.a]
api = "openai-chat"
base_url = "http://127.0.0.1:8080/v1"

[providers.b]
api = "anthropic"
base_url = "http://127.0.0.1:8081"

[models.sonnet]
provider = "b"
aliases = ["claude-4-sonnet"]
fallbacks = {sonnet}

[models.qwen]
provider = "a"
fallbacks = {qwen}

[models.llama]
provider = "a"
"""


def config_text(sonnet: str = "[]", qwen: str = "[]", server: str = "") -> str:
    return BASE.format(sonnet=sonnet, qwen=qwen, server=server)


def test_fallbacks_resolve_to_ids_in_order() -> None:
    cfg = parse_config(config_text(qwen='["claude-4-sonnet", "LLAMA"]'), env={})
    assert cfg.models["qwen"].fallbacks == ("sonnet", "llama")
    assert cfg.models["sonnet"].fallbacks == ()
    assert cfg.models["llama"].fallbacks == ()


def test_models_may_name_each_other() -> None:
    """A chain is flat (a fallback's own fallbacks are not followed): no cycle to refuse."""
    cfg = parse_config(config_text(sonnet='["qwen"]', qwen='["sonnet"]'), env={})
    assert cfg.models["sonnet"].fallbacks == ("qwen",)
    assert cfg.models["qwen"].fallbacks == ("sonnet",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            config_text(qwen='["gpt-9"]'),
            "models.qwen.fallbacks: unknown model 'gpt-9'; this server offers: llama, qwen, "
            "sonnet (aliases: claude-4-sonnet)",
        ),
        (config_text(qwen='["qwen"]'), "models.qwen.fallbacks: 'qwen' is this model itself"),
        (
            config_text(sonnet='["claude-4-sonnet"]'),
            "models.sonnet.fallbacks: 'claude-4-sonnet' is this model itself",
        ),
        (
            config_text(qwen='["sonnet", "claude-4-sonnet"]'),
            "models.qwen.fallbacks: 'claude-4-sonnet' names 'sonnet' a second time",
        ),
        (config_text(qwen='"sonnet"'), "models.qwen.fallbacks: expected an array, got a string"),
    ],
)
def test_fallback_mistakes_are_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env={})
    assert message in caught.value.lines(), caught.value.lines()


def test_an_unknown_fallback_never_means_the_default_model() -> None:
    """`server.default_model` stands in for unknown names clients send, not for a typo here."""
    text = config_text(qwen='["gpt-9"]', server='default_model = "llama"')
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env={})
    assert any(
        "models.qwen.fallbacks: unknown model 'gpt-9'" in line for line in caught.value.lines()
    )


def test_every_mistake_is_listed() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(config_text(sonnet='["sonnet"]', qwen='["nope"]'), env={})
    lines = caught.value.lines()
    assert any(line.startswith("models.sonnet.fallbacks:") for line in lines), lines
    assert any(line.startswith("models.qwen.fallbacks:") for line in lines), lines
