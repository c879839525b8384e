"""Model aliases and server.default_model in the configuration: parsed, and checked at load."""

from __future__ import annotations

import pytest

from cursor_byok.config import ConfigError, parse_config
from cursor_byok.llm.model_names import Resolved, Via

BASE = """
[server]
{server}

[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:8080/v1"

[models.sonnet]
provider = "local"
aliases = {sonnet_aliases}

[models.qwen]
provider = "local"
aliases = {qwen_aliases}
"""


def config_text(
    server: str = "", sonnet_aliases: str = '["claude-4-sonnet"]', qwen_aliases: str = "[]"
) -> str:
    return BASE.format(server=server, sonnet_aliases=sonnet_aliases, qwen_aliases=qwen_aliases)


def test_aliases_and_default_model_parse() -> None:
    cfg = parse_config(config_text('default_model = "claude-4-sonnet"'), env={})
    assert cfg.models["sonnet"].aliases == ("claude-4-sonnet",)
    assert cfg.models["qwen"].aliases == ()
    assert cfg.server.default_model == "sonnet"  # an alias in the file; the id after loading
    found = cfg.model_names().resolve("gpt-4")
    assert isinstance(found, Resolved) and found.model.id == "sonnet" and found.via is Via.DEFAULT


def test_no_default_model_by_default() -> None:
    cfg = parse_config(config_text(), env={})
    assert cfg.server.default_model is None and cfg.model_names().default is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            config_text(qwen_aliases='["claude-4-sonnet"]'),
            "models.qwen.aliases: 'claude-4-sonnet' is already an alias of model 'sonnet'",
        ),
        (
            config_text(qwen_aliases='["Sonnet"]'),
            "models.qwen.aliases: 'Sonnet' is already the id of model 'sonnet'",
        ),
        (
            config_text(qwen_aliases='[" "]'),
            "models.qwen.aliases: an alias must not be empty",
        ),
        (
            config_text('default_model = "gpt-4"'),
            "server.default_model: 'gpt-4' is not a served model id or alias; this server "
            "offers: qwen, sonnet (aliases: claude-4-sonnet)",
        ),
    ],
    ids=["duplicate-alias", "alias-is-another-id", "empty-alias", "default-not-served"],
)
def test_bad_names_are_refused_at_load(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, env={}, path="byok.toml")
    assert str(err.value) == f"byok.toml: {message}"


def test_default_model_with_no_models_is_refused() -> None:
    text = '[server]\ndefault_model = "x"\n'
    with pytest.raises(ConfigError) as err:
        parse_config(text, env={})
    assert str(err.value) == (
        "server.default_model: 'x' is not a served model id or alias; this server offers: "
        "none are configured"
    )
