"""Where the configuration file is (--config, $CURSOR_BYOK_CONFIG, ./cursor-byok.toml, the
per-user file), the SQLite path beside it, and the --port argument's type. config.py
re-exports these names."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

CONFIG_ENV = "CURSOR_BYOK_CONFIG"

LOCAL_CONFIG = "cursor-byok.toml"  # what `cursor-byok init` and scripts/serve write


def user_config_path(env: Mapping[str, str]) -> Path:
    """The per-user configuration: $XDG_CONFIG_HOME/cursor-byok/config.toml, by default
    ~/.config/cursor-byok/config.toml."""
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "cursor-byok" / "config.toml"


def find_config(
    path: str | Path | None, env: Mapping[str, str], cwd: Path | None = None
) -> Path | None:
    """The configuration to use: `path` (--config), else $CURSOR_BYOK_CONFIG, else
    ./cursor-byok.toml, else the per-user file; None when none of them is given or exists."""
    chosen = path or env.get(CONFIG_ENV)
    if chosen:
        return Path(chosen)
    for candidate in ((cwd or Path.cwd()) / LOCAL_CONFIG, user_config_path(env)):
        if candidate.is_file():
            return candidate
    return None


def beside_config(database: str, config_path: str | None) -> str:
    """A relative SQLite path of the file resolved against the file's folder (the same for
    `serve` and every other command, wherever they run); a URL, an absolute path, or a
    configuration not read from a file, as it is."""
    from .store.backends import is_postgres_url

    if config_path is None or not database or is_postgres_url(database):
        return database
    path = Path(database).expanduser()
    if path.is_absolute():
        return str(path)
    return str(Path(config_path).absolute().parent / path)


def port_number(text: str) -> int:
    """argparse type for a TCP port: a clear error instead of a traceback from the socket."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {port}")
    return port
