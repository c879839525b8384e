"""What every test runs in: a working directory and a home of its own, and an environment with
none of the user's configuration, keys or proxies (tests/conftest.py applies it to each test;
tests/app/test_hermetic.py plants a poisoned one and checks that no test sees it).

The real parts built once per machine (llama-server, the model, the third-party client, the
wheelhouse) stay where they are: their folders are resolved here, at import, from the real
environment, and handed to every test in variables of their own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CACHE_ENV = "CURSOR_BYOK_CACHE"  # scripts/llama_server.sh, scripts/container_image.sh, ...
REALCLIENT_ENV = "REALCLIENT_DIR"  # tests/realclient/setup.sh

# Knobs of the test harness and the set-up scripts; the server never reads them
# (tests/app/test_hermetic.py checks), so a test may see them.
HARNESS_ENV = frozenset(
    {
        CACHE_ENV,
        "CURSOR_BYOK_ARTIFACTS",
        "CURSOR_BYOK_CONTAINER_TESTS",
        "CURSOR_BYOK_KEEP_BUILD",
        "CURSOR_BYOK_LLAMA_THREADS",
        "CURSOR_BYOK_SKIP_REAL_UPSTREAM",
    }
)

# What the server reads from the environment besides the variables a configuration names:
# its configuration file, and the proxies of provider calls (llm/upstream.py).
PROXY_ENV = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy", "ws_proxy"})

# Provider and search keys by their usual names; any other *_API_KEY or *_API_TOKEN goes too.
PROVIDER_KEYS = frozenset(
    {
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "DEEPSEEK_API_KEY",
        "OPENROUTER_API_KEY",
        "MISTRAL_API_KEY",
        "GROQ_API_KEY",
        "XAI_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "BRAVE_API_KEY",
        "TAVILY_API_KEY",
        "CURSOR_API_KEY",
        "CURSOR_ACCESS_TOKEN",
    }
)


def cleared(name: str) -> bool:
    """Whether a test must not see the variable `name` of the environment it was started in."""
    if name in HARNESS_ENV:
        return False
    upper = name.upper()
    return (
        upper.startswith("CURSOR_")
        or name in PROVIDER_KEYS
        or upper.endswith(("_API_KEY", "_API_TOKEN"))
        or name.lower() in PROXY_ENV
    )


def cache_root(env: Mapping[str, str]) -> Path:
    """The real parts' cache, as scripts/llama_server.sh resolves it."""
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "cursor-byok"


def realclient_dir(env: Mapping[str, str]) -> Path:
    """Where tests/realclient/setup.sh installs the client, as it resolves it."""
    if env.get(REALCLIENT_ENV):
        return Path(env[REALCLIENT_ENV])
    return Path(env.get("HOME") or Path.home()) / ".cache" / "cursor-realclient"


# Resolved once, from the environment pytest was started in, before any test changes HOME.
REAL_CACHE = cache_root(os.environ)
REAL_REALCLIENT = realclient_dir(os.environ)


def isolated_environment(home: Path) -> dict[str, str]:
    """The variables a test gets on top of what is left after `cleared`: a home of its own
    (HOME, XDG_CONFIG_HOME, XDG_CACHE_HOME, XDG_DATA_HOME, XDG_STATE_HOME) and the real
    parts' folders."""
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        CACHE_ENV: str(REAL_CACHE),
        REALCLIENT_ENV: str(REAL_REALCLIENT),
    }
