"""What a local model server says about the window it serves, where it exposes it, so that
`doctor` can compare it with `context_window` and `init` can write it.

- llama.cpp's llama-server: `GET /props`, `default_generation_settings.n_ctx` (the window one
  request gets: the `-c` it was started with, divided among its `--parallel` slots), else a
  top-level `n_ctx`.
- Ollama: `GET /api/ps` gives a loaded model's `context_length` (what it serves now);
  `POST /api/show` gives the `num_ctx` its Modelfile sets (`parameters`) and the model's own
  maximum (`model_info["<architecture>.context_length"]`). Ollama serves its default window
  (4,096 tokens below 24 GiB of VRAM) unless `num_ctx` or OLLAMA_CONTEXT_LENGTH raise it, so the
  maximum alone is only an upper bound.

Each probe is one small request under a short timeout; a server that answers none of them
(vLLM, a remote API) gives None.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
import msgspec

from .upstream import ConnectFailed, Proxies

Server = Literal["llama.cpp", "ollama"]
_MAX_BODY = 1 << 20  # /props carries the chat template: tens of kB at most
_NUM_CTX = re.compile(r"^num_ctx\s+(\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ServedContext:
    """The window a local server serves a model with, and where that was read."""

    server: Server
    tokens: int
    source: str  # e.g. "GET /props default_generation_settings.n_ctx"
    exact: bool = True  # False: the model's own maximum (Ollama may serve less)
    model: str = ""  # the model the server names (llama.cpp's alias, Ollama's first model)


def is_local(base_url: str) -> bool:
    """Whether `base_url` is on this machine or its network (loopback, a private or link-local
    address, `localhost`, a single-label or `.local`/`.lan`/`.internal` name)."""
    host = urlsplit(base_url).hostname or ""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return (
            host == "localhost" or "." not in host or host.endswith((".local", ".lan", ".internal"))
        )
    return address.is_loopback or address.is_private or address.is_link_local


def server_root(base_url: str) -> str:
    """The server's own root, without the OpenAI-compatible `/v1`."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _count(value: Any) -> int:
    return value if isinstance(value, int) and 0 < value < 100_000_000 else 0


async def _json(
    session: aiohttp.ClientSession, method: str, url: str, body: Any = None
) -> dict[str, Any]:
    try:  # through the proxy provider calls would take (never direct behind its back)
        proxy = Proxies().for_url(url)
    except ConnectFailed:
        return {}
    try:
        async with session.request(method, url, json=body, proxy=proxy) as response:
            if response.status != 200:
                return {}
            data = await response.content.read(_MAX_BODY)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return {}
    try:
        decoded: Any = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


async def _llama(session: aiohttp.ClientSession, root: str) -> ServedContext | None:
    props = await _json(session, "GET", f"{root}/props")
    settings = props.get("default_generation_settings")
    n_ctx = _count(settings.get("n_ctx")) if isinstance(settings, dict) else 0
    source = "GET /props default_generation_settings.n_ctx"
    if not n_ctx:
        n_ctx, source = _count(props.get("n_ctx")), "GET /props n_ctx"
    if not n_ctx:
        return None
    alias = props.get("model_alias")
    model = alias if isinstance(alias, str) and "/" not in alias else ""
    return ServedContext("llama.cpp", n_ctx, source, model=model)


async def _ollama(session: aiohttp.ClientSession, root: str, model: str) -> ServedContext | None:
    if not model:
        tags = (await _json(session, "GET", f"{root}/api/tags")).get("models")
        first = tags[0] if isinstance(tags, list) and tags and isinstance(tags[0], dict) else {}
        name = first.get("name")
        if not isinstance(name, str) or not name:
            return None
        model = name
    loaded = (await _json(session, "GET", f"{root}/api/ps")).get("models")
    for entry in loaded if isinstance(loaded, list) else ():
        named = isinstance(entry, dict) and model in (entry.get("name"), entry.get("model"))
        if named and (n := _count(entry.get("context_length"))):
            return ServedContext("ollama", n, "GET /api/ps context_length", model=model)
    shown = await _json(session, "POST", f"{root}/api/show", {"model": model})
    parameters = shown.get("parameters")
    match = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    if match is not None and (n := _count(int(match.group(1)))):
        return ServedContext("ollama", n, "POST /api/show parameters num_ctx", model=model)
    info = shown.get("model_info")
    if isinstance(info, dict):
        for key, value in info.items():
            if key.endswith(".context_length") and (n := _count(value)):
                source = f"POST /api/show model_info {key}"
                return ServedContext("ollama", n, source, exact=False, model=model)
    return None


async def served_context(base_url: str, model: str, timeout_s: float = 3.0) -> ServedContext | None:
    """The window the server at `base_url` serves `model` with ("": the server's first model),
    or None when it exposes none (or does not answer within `timeout_s`)."""
    root = server_root(base_url)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
        found = await _llama(session, root)
        if found is not None:
            return found
        return await _ollama(session, root, model)


__all__ = ["ServedContext", "is_local", "served_context", "server_root"]
