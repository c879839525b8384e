from __future__ import annotations

from pathlib import Path

import pytest

from cursor_byok.cli import main
from cursor_byok.config import ConfigError, load_config, parse_config

GOOD = """
[server]
host = "127.0.0.1"
port = 8700
database = "cursor-byok.db"

[providers.openai]
api = "openai-chat"
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"

[models."gpt-5"]
provider = "openai"
model = "gpt-5"
context_window = 400000
max_output_tokens = 32000
reasoning = true
"""
KEY = "sk-planted-KEY-123456"
ENV = {"OPENAI_API_KEY": KEY}


def test_issue_example_parses() -> None:
    cfg = parse_config(GOOD, env=ENV)
    m = cfg.models["gpt-5"]
    assert m.settings.model == "gpt-5" and m.settings.max_output_tokens == 32000
    assert m.settings.reasoning and m.context_window == 400000
    assert m.provider.api == "openai-chat" and m.provider.api_key == KEY
    assert KEY not in repr(cfg) and KEY not in str(m.provider)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (('api = "openai-chat"', 'api = "openai-chatt"'), "providers.openai.api"),
        (('api_key_env = "OPENAI_API_KEY"', 'api_key_env = "NOPE_KEY"'), "NOPE_KEY"),
        (('provider = "openai"', 'provider = "opneai"'), "models.gpt-5.provider"),
        (("port = 8700", "port = 70000"), "server.port"),
        (("port = 8700", 'port = "x"'), "server.port"),
        (('host = "127.0.0.1"', 'host = "0.0.0.0"'), "server.auth_token"),
        (("reasoning = true", "reasoning = true\nbogus = 1"), "bogus"),
        (("[server]", "[server\n"), "not valid TOML"),
        (('api = "openai-chat"', 'api = "openai-chat"\nidle_timeout_s = 0'), "idle_timeout_s"),
        (
            ('api = "openai-chat"', 'api = "openai-chat"\nfirst_output_timeout_s = -1'),
            "providers.openai.first_output_timeout_s",
        ),
    ],
)
def test_bad_config_names_the_key(edit: tuple[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(GOOD.replace(*edit), env=ENV)
    assert needle in str(info.value)
    assert KEY not in str(info.value)


def test_provider_output_deadlines() -> None:
    default = parse_config(GOOD, env=ENV).providers["openai"]
    assert (default.first_output_timeout_s, default.idle_timeout_s) == (300.0, 120.0)
    text = GOOD.replace(
        'api = "openai-chat"',
        'api = "openai-chat"\nfirst_output_timeout_s = 900\nidle_timeout_s = 30',
    )
    set_ = parse_config(text, env=ENV).providers["openai"]
    assert (set_.first_output_timeout_s, set_.idle_timeout_s) == (900.0, 30.0)


def test_non_loopback_with_token_is_allowed() -> None:
    text = GOOD.replace('host = "127.0.0.1"', 'host = "0.0.0.0"\nauth_token = "t0ken-abc"')
    cfg = parse_config(text, env=ENV)
    assert cfg.server.auth_token == "t0ken-abc"
    assert "t0ken-abc" not in repr(cfg.server)


def test_local_server_needs_no_key() -> None:
    text = """
[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:8080/v1"
[models.small]
provider = "local"
"""
    cfg = parse_config(text, env={})
    assert cfg.models["small"].settings.model == "small"
    assert cfg.models["small"].provider.api_key is None


def test_load_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no configuration"):
        load_config(None, env={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml", env={})
    p = tmp_path / "c.toml"
    p.write_text(GOOD)
    assert load_config(None, env={**ENV, "CURSOR_BYOK_CONFIG": str(p)}).path == str(p)


def test_cli_reports_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    p = tmp_path / "c.toml"
    p.write_text(GOOD.replace('provider = "openai"', 'provider = "nope"'))
    assert main(["models", "--config", str(p)]) == 2
    err = capsys.readouterr().err
    assert "configuration error" in err and "models.gpt-5.provider" in err


def test_cli_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as asked:
        main(["--help"])
    assert asked.value.code == 0
    assert "serve" in capsys.readouterr().out


def test_vision_and_disabled_tools() -> None:
    cfg = parse_config(GOOD, env=ENV)
    assert cfg.models["gpt-5"].vision is False and cfg.server.disabled_tools == []
    text = GOOD.replace(
        'database = "cursor-byok.db"', 'database = "x.db"\ndisabled_tools = ["Shell"]'
    )
    cfg = parse_config(text + "vision = true\n", env=ENV)
    assert cfg.models["gpt-5"].vision is True and cfg.server.disabled_tools == ["Shell"]
    bad = GOOD.replace('database = "cursor-byok.db"', 'disabled_tools = ["Shel"]')
    with pytest.raises(ConfigError, match=r"server.disabled_tools: unknown tool\(s\) \['Shel'\]"):
        parse_config(bad, env=ENV)
    on = GOOD.replace('database = "cursor-byok.db"', 'enabled_tools = ["WriteShellStdin"]')
    assert parse_config(on, env=ENV).server.enabled_tools == ["WriteShellStdin"]
    wrong = GOOD.replace('database = "cursor-byok.db"', 'enabled_tools = ["Shell", "Nope"]')
    with pytest.raises(
        ConfigError,
        match=r"server.enabled_tools: \['Shell', 'Nope'\] cannot be switched on; the opt-in "
        r"tools are WriteShellStdin",
    ):
        parse_config(wrong, env=ENV)


WEB = """
[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[providers.claude]
api = "anthropic"
base_url = "http://127.0.0.1:9"

[models.m]
provider = "local"
"""


def test_web_fetch_and_image_generation() -> None:
    from cursor_byok.config import ImageGenerationConfig, WebFetchConfig

    plain = parse_config(WEB, env={})
    assert plain.web_fetch == WebFetchConfig() and not plain.web_fetch.server_side
    assert plain.image_generation is None
    text = WEB + (
        "[web_fetch]\nserver_side = true\nmax_text_chars = 5000\n"
        '[image_generation]\nprovider = "local"\nmodel = "gpt-image-1"\n'
        'extra_body = { quality = "low" }\n'
    )
    config = parse_config(text, env={})
    assert config.web_fetch.server_side and config.web_fetch.max_text_chars == 5000
    assert config.image_generation == ImageGenerationConfig(
        provider="local", model="gpt-image-1", extra_body={"quality": "low"}
    )


def test_web_fetch_conversion_and_address_settings() -> None:
    text = WEB + (
        "[web_fetch]\nconvert_max_bytes = 100000\nconvert_timeout_s = 2.5\n"
        'convert_workers = 3\nconvert_memory_mb = 0\nallowed_networks = ["10.20.0.0/16"]\n'
    )
    fetch = parse_config(text, env={}).web_fetch
    assert (fetch.convert_max_bytes, fetch.convert_timeout_s) == (100_000, 2.5)
    assert (fetch.convert_workers, fetch.convert_memory_mb) == (3, 0)
    assert fetch.allowed_networks == ["10.20.0.0/16"]
    bad = WEB + (
        "[web_fetch]\nconvert_max_bytes = 10\nconvert_timeout_s = nan\nconvert_workers = 0\n"
        'convert_memory_mb = 5\nallowed_networks = ["intranet", "10.0.0.0/33"]\n'
    )
    with pytest.raises(ConfigError) as info:
        parse_config(bad, env={})
    assert list(info.value.problems) == [
        "web_fetch.convert_max_bytes must be 1024-100000000",
        "web_fetch.convert_timeout_s must be between 0.1 and 600 seconds",
        "web_fetch.convert_workers must be 1-64",
        "web_fetch.convert_memory_mb must be 128-65536 (0: no limit)",
        "web_fetch.allowed_networks: 'intranet' is not a CIDR (10.0.0.0/8)",
        "web_fetch.allowed_networks: '10.0.0.0/33' is not a CIDR (10.0.0.0/8)",
    ]


def test_web_config_mistakes_are_named() -> None:
    text = WEB + (
        "[web_fetch]\nmax_bytes = 10\ntimeout_s = 0\nmax_redirects = 99\nmax_text_chars = 1\n"
        'servr_side = true\n[image_generation]\nprovider = "claude"\nmodel = " "\n'
        "timeout_s = -1\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    assert list(info.value.problems) == [
        "web_fetch.servr_side: unknown key; did you mean server_side?",
        "web_fetch.max_bytes must be 1024-100000000",
        "web_fetch.timeout_s must be between 0 and 600 seconds",
        "web_fetch.max_redirects must be 0-20",
        "web_fetch.max_text_chars must be 1000-10000000",
        "image_generation.provider: 'claude' is an anthropic provider; images need an "
        "OpenAI-compatible one (api openai-chat or openai-responses) whose base_url serves "
        "/images/generations",
        "image_generation.model must not be empty",
        "image_generation.timeout_s must be between 0 and 3600 seconds",
    ]
    with pytest.raises(ConfigError) as info:
        parse_config(WEB + '[image_generation]\nprovider = "nope"\nmodel = "x"\n', env={})
    assert info.value.problems[0].startswith("image_generation.provider: unknown provider 'nope'")
    with pytest.raises(ConfigError) as info:
        parse_config(WEB + '[image_generation]\nprovider = "local"\n', env={})
    assert list(info.value.problems) == ["image_generation.model: missing (required)"]


EYE = '\n[models."eye"]\nprovider = "openai"\nmodel = "gpt-4o"\naliases = ["seer"]\n'


def test_vision_model_names_a_configured_vision_model() -> None:
    """Issue 24 §6: `vision_model` (an id or an alias) resolves to the model id; the model
    it serves says supports_images through `takes_images`."""
    cfg = parse_config(GOOD + 'vision_model = "seer"\n' + EYE + "vision = true\n", env=ENV)
    assert cfg.models["gpt-5"].vision_model == "eye"
    assert cfg.models["gpt-5"].takes_images and not cfg.models["gpt-5"].vision
    assert cfg.models["eye"].vision_model is None and cfg.models["eye"].takes_images
    plain = parse_config(GOOD, env=ENV).models["gpt-5"]
    assert plain.vision_model is None and not plain.takes_images
    # A fallback's vision is resolved with it (the loop sends a text-only one notes).
    cfg = parse_config(GOOD + 'fallbacks = ["seer"]\n' + EYE + "vision = true\n", env=ENV)
    assert cfg.models["gpt-5"].fallback_vision == (True,)


@pytest.mark.parametrize(
    ("names", "vision", "error"),
    [
        (
            "nobody",
            "true",
            "models.gpt-5.vision_model: unknown model 'nobody'; this server offers: eye",
        ),
        (
            "eye",
            "false",
            "models.gpt-5.vision_model: 'eye' has no `vision = true`, so it cannot read images",
        ),
        ("gpt-5", "true", "models.gpt-5.vision_model: 'gpt-5' is this model itself"),
    ],
)
def test_a_bad_vision_model_is_one_clear_line(names: str, vision: str, error: str) -> None:
    text = GOOD + f'vision_model = "{names}"\n' + EYE + f"vision = {vision}\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, env=ENV)
    assert error in str(info.value)
    assert KEY not in str(info.value)
