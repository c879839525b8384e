"""The commented starter configuration `cursor-byok init` writes.

The local OpenAI-compatible provider is active (it needs no key); the OpenAI, Anthropic and
Gemini examples are commented out with a bare `#` before each TOML line, so removing that `#`
from the lines of one block enables it. Explanations use `# ` (hash, space).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from .llm import model_catalogue
from .llm.local_servers import ServedContext, served_context
from .llm.models import Prices

DEFAULT_PATH = "cursor-byok.toml"
# Where the starter's active provider points: llama.cpp's llama-server on its default port.
STARTER_LOCAL_URL = "http://127.0.0.1:8080/v1"
# The local servers `init` asks for the window they serve, in order: llama-server, Ollama.
PROBED_URLS = (STARTER_LOCAL_URL, "http://127.0.0.1:11434/v1")
PROBE_TIMEOUT_S = 1.5
# What Ollama serves when neither num_ctx nor OLLAMA_CONTEXT_LENGTH raise it (below 24 GiB of
# VRAM, its documentation says), written when only the model's maximum is known.
OLLAMA_DEFAULT_WINDOW = 4096

STARTER_CONFIG = """\
# cursor-byok configuration, written by `cursor-byok init`.
#
# Check it:            cursor-byok doctor --config THIS_FILE
# See the model list:  cursor-byok models --config THIS_FILE
# Run the server:      cursor-byok serve  --config THIS_FILE
#
# API keys: name an environment variable with `api_key_env` (recommended) or write
# `api_key = "..."` (then keep this file private). Keys never appear in logs or output.
# To enable an example below, remove the leading `#` from each line of its block.

[server]
host = "127.0.0.1"            # loopback only; any other address requires auth_token
port = 8700
database = "cursor-byok.db"   # SQLite: conversations and call records (beside this file)
# auth_token = "change-me"    # clients must then send `Authorization: Bearer change-me`
http2 = true                  # GetServerConfig tells clients HTTP/2 is allowed; false puts the
                              # Cursor IDE on the HTTP/1.1 RunSSE + BidiAppend path
# certificate = "cert.pem"    # serve HTTPS (both or neither)
# private_key = "key.pem"
log_format = "text"           # "text" (readable) or "json" (one JSON object per line)
log_level = "info"            # debug, info, warning or error (cursor-byok serve --log-level)
# default_model = "local"     # a model id or alias that serves requests for names no model
                              # answers to (the IDE's "default"/Auto, a client's old name);
                              # unset, such a request fails with the list of served models

# ---------------------------------------------------------------------------------------------
# Providers: where requests go. `api` is one of openai-chat, openai-responses, anthropic,
# gemini. `base_url` defaults to the vendor's public endpoint. Deadlines of a model call, in
# seconds: first_output_timeout_s (300: to the first text, thinking or tool call; raise it
# for a slow local server or long hidden reasoning), idle_timeout_s (120: between them),
# connect_timeout_s (30), read_timeout_s (300: one read).
#
# Models: each [models.<id>] is one entry in the client's model picker; <id> is what clients
# select. `model` is the upstream model name (defaults to <id>), `name` the display name,
# `aliases` other names clients may ask for (matched ignoring case; unique across models).
# Optional per model: max_output_tokens, reasoning, reasoning_effort (none, minimal, low,
# medium, high, xhigh), efforts (what the IDE's thinking picker offers; a reasoning model
# offers low, medium, high unless set), reasoning_budget, temperature, extra_body,
# extra_headers, context_window and prices = { input = ..., output = ..., cache_read = ...,
# cache_write = ... } in USD per million tokens (the cost in logs, metrics, the dashboard and
# budgets). `vision = true` for a model that reads images; a model without it may name
# `vision_model = "<a model with vision = true>"`, which describes pasted images for it.
# context_window and prices default from the model catalogue (the genai-prices package
# installed with cursor-byok; `cursor-byok models` shows what each model matched): its entry
# for the provider and the exact upstream name, or `catalogue = "<its name there>"`. Set them
# here to override; a server on this machine (loopback) costs $0 ("local").
# ---------------------------------------------------------------------------------------------

# A local OpenAI-compatible server. Default ports:
#   llama.cpp llama-server  http://127.0.0.1:8080/v1
#   Ollama                  http://127.0.0.1:11434/v1
#   vLLM                    http://127.0.0.1:8000/v1
[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:8080/v1"
# api_key_env = "LOCAL_LLM_API_KEY"   # only if your server checks a key (vLLM --api-key)

[models.local]
provider = "local"
model = "local-model"         # the name your server serves (Ollama: e.g. "qwen2.5-coder:7b")
name = "Local model"
context_window = 8192         # what your server serves (llama-server -c / --ctx-size, Ollama's
                              # num_ctx; doctor compares them): larger, and long chats
                              # are refused before the server learns the real one
#vision_model = "gpt-5"       # describes the images you paste (sent to that provider)

# OpenAI (key from https://platform.openai.com/api-keys, exported as OPENAI_API_KEY).
#[providers.openai]
#api = "openai-responses"      # or "openai-chat"
#api_key_env = "OPENAI_API_KEY"
#
#[models.gpt-5]
#provider = "openai"
#model = "gpt-5"
#name = "GPT-5"
#reasoning = true
#reasoning_effort = "medium"
#vision = true                 # it reads images (the local model above may name it)
{catalogue openai gpt-5}

# Anthropic (key exported as ANTHROPIC_API_KEY).
#[providers.anthropic]
#api = "anthropic"
#api_key_env = "ANTHROPIC_API_KEY"
#
#[models.claude-sonnet]
#provider = "anthropic"
#model = "claude-sonnet-4-5"
#name = "Claude Sonnet"
#aliases = ["claude-4-sonnet", "claude-sonnet-4-5"]
#max_output_tokens = 16000
#reasoning = true
#reasoning_budget = 4000
{catalogue anthropic claude-sonnet-4-5}
#web_search = ["tavily", "searx"]   # this model's own web search order (see below)

# Google Gemini (key from AI Studio, exported as GEMINI_API_KEY).
#[providers.gemini]
#api = "gemini"
#api_key_env = "GEMINI_API_KEY"
#
#[models.gemini-flash]
#provider = "gemini"
#model = "gemini-2.5-flash"
#name = "Gemini Flash"
{catalogue google gemini-2.5-flash}

# ---------------------------------------------------------------------------------------------
# Web tools (docs/operations.md, "Web tools").
# WebFetch: the IDE fetches a page after the user approves it, and the model reads it as text.
# A client that cannot fetch (it answers "Not implemented") gets an error result, unless the
# server fetches for it: server_side = true, public addresses only (never loopback, private or
# link-local ones), within the bounds below.
#[web_fetch]
#server_side = false           # off by default: a shared server should not fetch for the model
#max_bytes = 2000000           # of one page the server fetches
#timeout_s = 20                # one server fetch, redirects included
#max_redirects = 5
#max_text_chars = 100000       # the page text the model reads; the rest is cut, with a note
#convert_max_bytes = 4000000   # HTML to text runs in worker processes, each page bounded:
#convert_timeout_s = 5         #   in size, in time (the worker is killed at the deadline)
#convert_workers = 2           #   and in memory (each worker's address space)
#convert_memory_mb = 1024
#allowed_networks = []         # CIDRs the server-side fetch may reach although not public
#
# GenerateImage: offered only with this table. `provider` names a provider above whose
# base_url serves OpenAI's /images/generations; the image is saved in the workspace.
#[image_generation]
#provider = "openai"
#model = "gpt-image-1"
#timeout_s = 120
#
# Web search: the model's WebSearch tool, offered only when a backend is listed here (and the
# IDE enables web search). The IDE asks the user to approve each search; this server runs it:
# the first backend in `backends` that answers wins, a failing one passes to the next.
# Kinds: "searxng" (a self-hosted SearXNG; enable the json format in its settings.yml),
# "brave" (Brave Search API) and "tavily" (Tavily), keys from the environment only. A model's
# `web_search = [...]` replaces the list for that model. `cursor-byok doctor` searches once
# with each backend. Details: docs/operations.md, "Web search backends".
# ---------------------------------------------------------------------------------------------
#[web_search]
#backends = ["searx", "brave"]
#timeout_s = 15                # one backend attempt
#max_results = 8
#
#[web_search.backend.searx]
#kind = "searxng"
#url = "http://127.0.0.1:8888"
#
#[web_search.backend.brave]
#kind = "brave"
#api_key_env = "BRAVE_API_KEY"
#
#[web_search.backend.tavily]
#kind = "tavily"
#api_key_env = "TAVILY_API_KEY"
"""

# Environment variables the examples name (all of them, when every example is enabled).
EXAMPLE_ENV = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "BRAVE_API_KEY",
    "TAVILY_API_KEY",
)

_COMMENTED_TOML = re.compile(r"^#(?=[\[A-Za-z])", re.MULTILINE)
# The local model's window line and the comment lines under it (the first active one).
_LOCAL_WINDOW = re.compile(r"^context_window = \d+(.*\n)((?:[ ]+#.*\n)*)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class LocalServer:
    """A local server that answered `init`'s probe, and the window it serves."""

    base_url: str
    served: ServedContext

    @property
    def window(self) -> int:
        served = self.served
        return served.tokens if served.exact else min(served.tokens, OLLAMA_DEFAULT_WINDOW)


async def _probe(urls: Sequence[str], timeout_s: float) -> LocalServer | None:
    for url in urls:
        served = await served_context(url, "", timeout_s)
        if served is not None:
            return LocalServer(url, served)
    return None


def probe_local_servers(
    urls: Sequence[str] = PROBED_URLS, timeout_s: float = PROBE_TIMEOUT_S
) -> LocalServer | None:
    """The first of `urls` whose server says what window it serves (None: none answered)."""
    return asyncio.run(_probe(urls, timeout_s))


def starter_config(local: LocalServer | None = None) -> str:
    """The starter (with the catalogue's defaults beside each example model); with `local`,
    its active provider points at that server, with the model it names and the window it
    serves."""
    text = _catalogued()
    if local is None:
        return text
    served = local.served
    text = text.replace(f'base_url = "{STARTER_LOCAL_URL}"', f'base_url = "{local.base_url}"', 1)
    if served.model:
        text = text.replace('model = "local-model"  ', f"model = {_quoted(served.model)}  ", 1)
    how = f"{served.server} at {local.base_url} serves {served.tokens} ({served.source})"
    if not served.exact:
        how += f"; Ollama's default {OLLAMA_DEFAULT_WINDOW} unless num_ctx raises it"
    return _LOCAL_WINDOW.sub(
        lambda m: f"context_window = {local.window}{m[1]}{m[2]}# (init read it: {how})\n",
        text,
        count=1,
    )


def _quoted(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's for the names servers give)."""
    return json.dumps(value, ensure_ascii=False)


_CATALOGUE_LINE = re.compile(r"^\{catalogue (\S+) (\S+)\}$", re.MULTILINE)


def _catalogued() -> str:
    """The starter file, with what the catalogue says of each example model written beside
    it (as comments: the catalogue stays the source until a value is set here)."""
    return _CATALOGUE_LINE.sub(lambda m: _catalogue_comment(m[1], m[2]), STARTER_CONFIG)


def _catalogue_comment(provider: str, model: str) -> str:
    entry = model_catalogue.lookup(provider, model)
    if entry is None:
        return f"# Not in the catalogue ({model_catalogue.source()}): set prices, context_window."
    lines = [f"# Catalogue defaults ({entry.source}, {entry.key}); set one here to override:"]
    if entry.context_window:
        lines.append(f"#   context_window = {entry.context_window}")
    prices = entry.prices
    if prices is not None:
        flat = msgspec.structs.replace(prices, long_context=None, long_context_tokens=0)
        lines.append(f"#   prices = {prices_toml(flat)}")
        if prices.long_context is not None:
            lines.append(
                f"#     over {prices.long_context_tokens} prompt tokens, in the same table: "
                f"long_context_tokens = {prices.long_context_tokens},"
            )
            lines.append(f"#     long_context = {prices_toml(prices.long_context)}")
    return "\n".join(lines)


def prices_toml(prices: Prices) -> str:
    """`prices` as a TOML inline table, as the configuration reads it."""
    fields = msgspec.structs.asdict(prices)
    tier = fields.pop("long_context")
    parts = [f"{k} = {v:g}" for k, v in fields.items() if v]
    if tier is not None:
        parts.append(f"long_context = {prices_toml(tier)}")
    return "{ " + ", ".join(parts) + " }"


def uncomment_examples(text: str) -> str:
    """The config with every commented-out example enabled (`#key = ...` -> `key = ...`)."""
    return _COMMENTED_TOML.sub("", text)
