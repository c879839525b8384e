"""Configuration mistakes: every one in the file at once, each with its full TOML key, and a
did-you-mean for unknown keys (issue 13, point 12)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from cursor_byok import cli
from cursor_byok.config import ConfigError, parse_config
from cursor_byok.doctor import run_checks

THREE_MISTAKES = """
[server]
port = "8700"

[providers.openai]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"
api_key_envv = "OPENAI_API_KEY"

[models.gpt]
model = "gpt-5"
context_window = 400000
"""
EXPECTED = [
    "server.port: expected an integer, got a string",
    "providers.openai.api_key_envv: unknown key; did you mean api_key_env?",
    "models.gpt.provider: missing (required)",
]
SECRET = "sk-config-PLANTED-9999888877776666"


def test_three_mistakes_are_reported_together_with_full_keys() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(THREE_MISTAKES, env={}, path="c.toml")
    assert list(info.value.problems) == EXPECTED
    assert str(info.value).splitlines() == [f"c.toml: {line}" for line in EXPECTED]


@pytest.mark.parametrize("command", ["models", "serve"])
def test_the_cli_prints_one_line_per_mistake_and_exits_2(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(THREE_MISTAKES)
    assert cli.main([command, "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"cursor-byok: configuration error: {cfg}: {line}" for line in EXPECTED]


def test_serve_in_a_process_prints_them_too(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(THREE_MISTAKES)
    done = subprocess.run(
        [sys.executable, "-m", "cursor_byok", "serve", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"cursor-byok: configuration error: {cfg}: {line}" for line in EXPECTED
    ]


def test_doctor_shows_one_row_per_mistake(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(THREE_MISTAKES)
    rows = asyncio.run(run_checks(str(cfg), env={}))
    config_rows = [r for r in rows if r.name == "config"]
    assert [r.detail for r in config_rows] == [f"{cfg}: {line}" for line in EXPECTED]
    assert {r.status for r in config_rows} == {"FAIL"}
    assert config_rows[1].next_step == "rename the key to api_key_env"


NESTED = f"""
[serverr]
[server]
Port = 8700
[providers.openai]
api = "openai-chatt"
headers = "Bearer {SECRET}"
[providers."my.local"]
api = "openai-chat"
base_url = "127.0.0.1:8080"
connect_timeout_s = "fast"
[models.gpt]
provider = "openai"
reasoning_effort = "max"
[models."qwen2.5"]
provider = "my.lokal"
prices = {{ input = "1", outptu = 2 }}
"""


def test_nested_keys_quoting_and_value_checks_in_one_report() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(NESTED, env={})
    assert list(info.value.problems) == [
        "serverr: unknown key; did you mean server?",
        "server.Port: unknown key; did you mean port?",
        "providers.openai.headers: expected a table, got a string",
        'providers."my.local".connect_timeout_s: expected a number, got a string',
        'models."qwen2.5".prices.input: expected a number, got a string',
        'models."qwen2.5".prices.outptu: unknown key; did you mean output?',
        # The value checks run on what was left: every one is reported as well.
        "providers.openai.api: unknown api 'openai-chatt'; use one of "
        "['openai-chat', 'openai-responses', 'anthropic', 'gemini']",
        'providers."my.local".base_url must start with http:// or https://',
        # models.gpt names a provider already reported: no second line for it.
        "models.gpt.reasoning_effort must be one of "
        "['none', 'minimal', 'low', 'medium', 'high', 'xhigh']",
        "models.\"qwen2.5\".provider: unknown provider 'my.lokal' (providers: my.local, "
        "openai); did you mean 'my.local'?",
    ]
    assert SECRET not in str(info.value)  # a value in the wrong place is never echoed


def test_an_unknown_key_without_a_close_name_lists_the_keys() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config('[providers.x]\napi = "openai-chat"\nbase_url = "http://h"\nzzz = 1\n', env={})
    (problem,) = info.value.problems
    assert problem.startswith("providers.x.zzz: unknown key; the keys here are api, base_url, ")
    assert ", read_timeout_s" in problem


def test_a_missing_key_variable_and_a_bad_port_together() -> None:
    text = '[server]\nport = 0\n[providers.o]\napi = "openai-chat"\napi_key_env = "NOPE_VAR"\n'
    text += '[models.m]\nprovider = "o"\n'
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    assert info.value.problems == (
        "server.port must be 1-65535, got 0",
        "providers.o.api_key_env: environment variable NOPE_VAR is not set",
    )


def test_question_timeout_is_read_and_bounded_with_the_other_mistakes() -> None:
    base = '[providers.p]\napi = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
    config = parse_config("[server]\nquestion_timeout_s = 90\n" + base, env={}, path="c.toml")
    assert config.server.question_timeout_s == 90
    assert parse_config(base, env={}, path="c.toml").server.question_timeout_s == 1800
    with pytest.raises(ConfigError) as info:
        parse_config(
            "[server]\nquestion_timeout_s = 0\ntool_timeout_s = 0\n" + base, env={}, path="c.toml"
        )
    assert list(info.value.problems) == [
        "server.tool_timeout_s must be between 0 and 86400 seconds",
        "server.question_timeout_s must be between 0 and 86400 seconds",
    ]
