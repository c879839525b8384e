"""Warnings at `serve` start for what would otherwise show only when a client fails: no models,
or a provider that nothing answers at.

Why a TCP connect and not doctor's ping: the ping is a billed request that may take seconds;
a connect says whether anything listens, within PROBE_BUDGET_S for all providers together.
It runs once the server listens, on threads of its own (a name lookup cannot be cancelled,
and a lookup left hanging must not hold up the process's exit), so serving never waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import socket
import threading
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

from .config import Config
from .llm.settings import ProviderSettings
from .starter_config import STARTER_LOCAL_URL

PROBE_BUDGET_S = 1.5

log = logging.getLogger("cursor_byok")


@dataclass(frozen=True, slots=True)
class Target:
    """Where a TCP connect for a provider goes: its base URL's host, or the proxy's."""

    host: str
    port: int
    proxy: str | None = None  # "host:port" of the proxy, when the connect goes to one


def doctor_command(config: Config) -> str:
    if config.path is None:
        return "cursor-byok doctor"
    return f"cursor-byok doctor --config {shlex.quote(config.path)}"


def target_of(base_url: str) -> Target | None:
    """The address a call to `base_url` connects to first (the proxy when the environment
    names one for it, as the HTTP clients do); None when the URL names none."""
    parts = urlsplit(base_url)
    if not parts.hostname:
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(parts.hostname):
        via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if via.hostname:  # host and port only: a proxy URL may hold a password
            return Target(via.hostname, via.port or 80, f"{via.hostname}:{via.port or 80}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return Target(parts.hostname, port)


def _connect(target: Target, timeout: float) -> str | None:
    """Why nothing answers at `target`, or None when a connection opened (blocking)."""
    try:
        socket.create_connection((target.host, target.port), timeout=timeout).close()
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror:
        return f"the name {target.host} does not resolve"
    except TimeoutError:
        return f"no connection within {timeout:g} s"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    return None


async def probe(target: Target, budget_s: float = PROBE_BUDGET_S) -> str | None:
    """`_connect` on a daemon thread, waited for at most `budget_s`."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str | None] = loop.create_future()

    def settle(reason: str | None) -> None:
        if not answer.done():
            answer.set_result(reason)

    def run() -> None:
        reason = _connect(target, budget_s)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, reason)

    threading.Thread(target=run, name="cursor-byok-probe", daemon=True).start()
    try:
        async with asyncio.timeout(budget_s):
            return await answer
    except TimeoutError:
        return f"no connection within {budget_s:g} s"


def _unreachable_line(provider: ProviderSettings, target: Target, reason: str, doctor: str) -> str:
    url = provider.base_url
    if target.proxy is not None:
        return (
            f"provider {provider.name}: the proxy {target.proxy} for {url} does not answer "
            f"({reason}); calls to its models will fail until it does. Run `{doctor}`"
        )
    if url == STARTER_LOCAL_URL:
        return (
            f"provider {provider.name}: nothing answers at {url} ({reason}), the starter "
            f"configuration's local model server: start llama-server there, or point "
            f"providers.{provider.name}.base_url at your server; then run `{doctor}`"
        )
    return (
        f"provider {provider.name}: nothing answers at {url} ({reason}); calls to its models "
        f"will fail until it does. Run `{doctor}`"
    )


async def start_warnings(config: Config, budget_s: float = PROBE_BUDGET_S) -> list[str]:
    """One line per problem: no models; each provider a model uses that nothing answers at."""
    doctor = doctor_command(config)
    lines: list[str] = []
    if not config.models:
        lines.append(
            "no models configured: clients will show an empty model list; add a "
            f"[models.<id>] section, then run `{doctor}`"
        )
    used = {m.provider.name: m.provider for m in config.models.values()}
    targets = {name: target_of(p.base_url) for name, p in used.items()}
    probed = {name: t for name, t in targets.items() if t is not None}
    reasons = await asyncio.gather(*(probe(t, budget_s) for t in probed.values()))
    for (name, target), reason in zip(probed.items(), reasons, strict=True):
        if reason is not None:
            lines.append(_unreachable_line(used[name], target, reason, doctor))
    return lines


async def warn_at_start(config: Config, budget_s: float = PROBE_BUDGET_S) -> None:
    try:
        lines = await start_warnings(config, budget_s)
    except Exception:  # a bug here must not stop the server
        log.exception("the start-up checks failed")
        return
    for line in lines:
        log.warning("%s", line)
