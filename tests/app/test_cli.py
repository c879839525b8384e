from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cursor_byok import cli
from cursor_byok.config import Config, parse_config
from cursor_byok.llm.model_catalogue import source
from cursor_byok.starter_config import EXAMPLE_ENV, starter_config, uncomment_examples

MODELS_TOML = """
[providers.openai]
api = "openai-responses"
api_key_env = "CLI_TEST_OPENAI_KEY"

[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:8080/v1"

[models.gpt-5]
provider = "openai"
name = "GPT-5"
context_window = 400000
reasoning = true
reasoning_effort = "high"

[models.qwen]
provider = "local"
model = "qwen2.5-coder:7b"
"""
SECRET = "sk-cli-test-PLANTED-0000111122223333"


# -- init -------------------------------------------------------------------------------------


def test_init_writes_a_parseable_commented_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "cursor-byok.toml"
    assert cli.main(["init", str(target)]) == 0
    text = target.read_text()
    assert text == starter_config()
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert "cursor-byok doctor --config" in capsys.readouterr().err

    # As written (only the local server enabled): parses with no environment at all.
    config = parse_config(text, env={})
    assert list(config.models) == ["local"]
    assert config.models["local"].provider.base_url == "http://127.0.0.1:8080/v1"

    # Every example enabled: parses once the variables it names are set.
    full = uncomment_examples(text)
    for var in EXAMPLE_ENV:
        assert var in text
    env = {var: f"test-{var}" for var in EXAMPLE_ENV}
    config = parse_config(full, env=env)
    assert {p.api for p in config.providers.values()} == {
        "openai-chat",
        "openai-responses",
        "anthropic",
        "gemini",
    }
    assert len(config.models) == 4
    assert all(m.prices is not None for m in config.models.values() if m.id != "local")
    assert config.models["claude-sonnet"].aliases == ("claude-4-sonnet", "claude-sonnet-4-5")
    # The web search example: two backends server-wide, the Anthropic model's own order.
    assert config.web_search.order == ("searx", "brave")
    assert config.web_search.order_for("claude-sonnet") == ("tavily", "searx")
    assert set(config.web_search.backends) == {"searx", "brave", "tavily"}
    assert not parse_config(text, env={}).web_search.offered
    # The commented default_model line, enabled, names a served model.
    with_default = parse_config(text.replace("# default_model", "default_model"), env={})
    assert with_default.server.default_model == "local"
    for text_ in ("llama.cpp", "Ollama", "vLLM", "11434", "8000"):
        assert text_ in text
    # ...and without them, the error names the missing variable.
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        parse_config(full, env={})


def test_init_default_path_and_refuses_to_overwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["init"]) == 0
    target = tmp_path / "cursor-byok.toml"
    target.write_text("# mine\n")
    assert cli.main(["init"]) == 1
    assert "--force" in capsys.readouterr().err
    assert target.read_text() == "# mine\n"
    assert cli.main(["init", "--force"]) == 0
    assert target.read_text() == starter_config()


def test_init_into_a_directory(tmp_path: Path) -> None:
    assert cli.main(["init", str(tmp_path)]) == 0
    assert (tmp_path / "cursor-byok.toml").read_text() == starter_config()


# -- models -----------------------------------------------------------------------------------


def test_models_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(MODELS_TOML)
    monkeypatch.setenv("CLI_TEST_OPENAI_KEY", SECRET)
    assert cli.main(["models", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == [
        "ID",
        "NAME",
        "PROVIDER",
        "API",
        "UPSTREAM",
        "MODEL",
        "CONTEXT",
        "PRICES",
        "(USD/Mtok",
        "in/out)",
        "CATALOGUE",
        "REASONING",
        "ALIASES",
    ]
    # gpt-5: its window from the TOML, its prices from the catalogue entry it matches exactly.
    package, version = source().split()
    assert lines[1].split() == [
        "gpt-5",
        "GPT-5",
        "openai",
        "openai-responses",
        "gpt-5",
        "400,000",
        "$1.25",
        "/",
        "$10",
        "(catalogue)",
        "openai/gpt-5",
        f"({package}",
        f"{version})",
        "yes",
        "(high)",
    ]
    # A server on loopback: zero prices, "local"; no window anywhere: the default, marked.
    assert lines[2].split() == [
        "qwen",
        "qwen",
        "local",
        "openai-chat",
        "qwen2.5-coder:7b",
        "128,000*",
        "local",
        "($0)",
        "not",
        "in",
        "catalogue",
        "no",
    ]
    assert lines[3].startswith("* the window is not in the configuration: the default, 128,000")
    assert SECRET not in out
    assert len(lines) == 4  # no default model line when none is set


def test_models_table_lists_aliases_and_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    text = MODELS_TOML.replace(
        'reasoning_effort = "high"\n',
        'reasoning_effort = "high"\naliases = ["gpt5", "openai-best"]\n',
    )
    cfg.write_text('[server]\ndefault_model = "gpt5"\n' + text)
    monkeypatch.setenv("CLI_TEST_OPENAI_KEY", SECRET)
    assert cli.main(["models", "--config", str(cfg)]) == 0
    lines = capsys.readouterr().out.splitlines()
    aliases_at = lines[0].index("ALIASES")
    assert lines[1][aliases_at:] == "gpt5, openai-best"
    assert lines[2].split()[0] == "qwen" and len(lines[2]) <= aliases_at  # none: an empty cell
    assert lines[4] == "default model (for names not served): gpt-5"


def test_models_with_config_error_and_no_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(MODELS_TOML)
    monkeypatch.delenv("CLI_TEST_OPENAI_KEY", raising=False)
    assert cli.main(["models", "--config", str(cfg)]) == 2
    assert "CLI_TEST_OPENAI_KEY is not set" in capsys.readouterr().err
    empty = tmp_path / "e.toml"
    empty.write_text("[server]\n")
    assert cli.main(["models", "--config", str(empty)]) == 1
    assert "empty model list" in capsys.readouterr().err


# -- serve ------------------------------------------------------------------------------------


def test_serve_still_calls_app_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cursor_byok.app

    seen: dict[str, object] = {}

    def fake_serve(
        config: Config,
        *,
        host: str | None,
        port: int | None,
        database: str | None,
        log_level: str | None,
    ) -> int:
        seen.update(config=config, host=host, port=port, database=database, log_level=log_level)
        return 7

    monkeypatch.setattr(cursor_byok.app, "serve", fake_serve)
    cfg = tmp_path / "c.toml"
    cfg.write_text(starter_config())
    argv = ["serve", "--config", str(cfg), "--host", "::1", "--port", "9999", "--db", "x.db"]
    assert cli.main(argv) == 7
    assert isinstance(seen["config"], Config)
    assert (seen["host"], seen["port"], seen["database"]) == ("::1", 9999, "x.db")
    assert seen["log_level"] is None
    assert cli.main(["serve", "--config", str(cfg)]) == 7
    assert (seen["host"], seen["port"], seen["database"]) == (None, None, None)
    assert cli.main(["serve", "--config", str(cfg), "--log-level", "DEBUG"]) == 7
    assert seen["log_level"] == "debug"
    with pytest.raises(SystemExit) as bad:
        cli.main(["serve", "--config", str(cfg), "--log-level", "loud"])
    assert bad.value.code == 2


def test_log_level_setting(tmp_path: Path) -> None:
    from cursor_byok.config import ConfigError, parse_config

    assert parse_config("[server]\n").server.log_level == "info"
    assert parse_config('[server]\nlog_level = "warning"\n').server.log_level == "warning"
    with pytest.raises(ConfigError, match=r"server\.log_level must be one of debug, info"):
        parse_config('[server]\nlog_level = "loud"\n')


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """`cursor-byok` alone is a usage error (a script that forgot the command must not
    succeed): the help goes to stderr, with exit status 2, as for an unknown option."""
    assert cli.main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: cursor-byok")
    for command in ("serve", "init", "models", "doctor", "token"):
        assert command in err


def test_serve_with_a_database_that_cannot_be_opened_is_one_clear_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "cursor-byok.toml"
    config.write_text(
        '[server]\nhost = "127.0.0.1"\nport = 1\n'
        f'database = "{tmp_path}/no/such/dir/byok.db"\n'
        '[providers.local]\napi = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[models.alpha]\nprovider = "local"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "cursor_byok", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"the directory '{tmp_path}/no/such/dir' does not exist" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("value", "said"), [("99999", "1-65535, got 99999"), ("x", "'x'")])
def test_serve_rejects_a_bad_port_argument(
    value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "--port", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --port: " in err and said in err


# -- finding the configuration ----------------------------------------------------------------


def _no_config_anywhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A working directory and a home without any configuration, no CURSOR_BYOK_CONFIG."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.delenv("CURSOR_BYOK_CONFIG", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLI_TEST_OPENAI_KEY", SECRET)
    monkeypatch.chdir(work)
    return home


def test_the_quick_start_finds_the_file_init_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """README quick start: `init` (or scripts/serve) writes ./cursor-byok.toml, then `models`
    and `doctor` with no --config use it."""
    _no_config_anywhere(monkeypatch, tmp_path)
    assert cli.main(["models"]) == 2
    err = capsys.readouterr().err
    assert "no configuration" in err and "./cursor-byok.toml" in err
    Path("cursor-byok.toml").write_text(MODELS_TOML)
    assert cli.main(["models"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "gpt-5"


def test_the_per_user_file_is_used_when_the_directory_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = _no_config_anywhere(monkeypatch, tmp_path)
    user = home / ".config" / "cursor-byok" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(MODELS_TOML)
    assert cli.main(["models"]) == 0
    assert "gpt-5" in capsys.readouterr().out
    xdg = tmp_path / "xdg"
    (xdg / "cursor-byok").mkdir(parents=True)
    (xdg / "cursor-byok" / "config.toml").write_text("[server]\n")  # no models
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert cli.main(["models"]) == 1  # that file, not ~/.config's
    # ./cursor-byok.toml comes before the per-user file, and the environment before both.
    Path("cursor-byok.toml").write_text(MODELS_TOML)
    assert cli.main(["models"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("CURSOR_BYOK_CONFIG", str(tmp_path / "missing.toml"))
    assert cli.main(["models"]) == 2
    assert "missing.toml" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([flag])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"cursor-byok {cli.__version__}"


@pytest.mark.parametrize("command", ["serve", "init", "models", "doctor"])
def test_every_subcommand_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    assert f"cursor-byok {command}" in capsys.readouterr().out
