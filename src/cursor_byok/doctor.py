"""`cursor-byok doctor`: check the configuration, the database, every provider, the window of
every model on a local server (doctor_windows.py) and every web search backend.

Every check prints one row (check, status, detail, next step); every failure names the next
step. Provider checks send one tiny real request per provider (its first model) under a
timeout; search checks one tiny search per configured backend. Nothing printed ever contains a
key: details pass through the log redactor.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import socket
import sqlite3
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

import msgspec

from .config import CONFIG_ENV, Config, ConfigError, Model, RawConfig, load_config
from .database_size import measured_size, size_row
from .doctor_windows import local_window_rows
from .llm.events import DoneEvent, ErrorEvent
from .llm.registry import ADAPTERS, LLMRegistry
from .llm.types import RequestMessages, UserMessage
from .observability.logs import redact_text, secrets_of
from .start_check import moved_database
from .store.backends import display_name, is_postgres_url, open_store
from .store.errors import (
    BackendMissingError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
    StoreLockedError,
    StoreSchemaError,
)
from .store.migrate import latest_version, load_migrations
from .store.postgres import PostgresStore
from .store.postgres.missing import INSTALL as INSTALL_POSTGRES
from .store.sqlite import SQLiteStore
from .token_report import findings, read_report
from .web.search import SearchBackend, WebSearch
from .web.types import SearchResults, WebSearchJob

Status = Literal["OK", "WARN", "FAIL", "SKIP"]
PING = RequestMessages(system_prompt="Reply with OK.", messages=(UserMessage.of_text("ping"),))
PING_MAX_OUTPUT_TOKENS = 16
DEFAULT_TIMEOUT_S = 20.0
WIDTH = 100  # the widest line doctor prints
NAME_COLUMN = 24  # wider check names get a line of their own


@dataclass
class Check:
    name: str
    status: Status
    detail: str
    next_step: str = ""


# -- configuration -------------------------------------------------------------------------


def _config_next_step(message: str) -> str:
    if "environment variable" in message and "is not set" in message:
        var = message.split("environment variable", 1)[1].split()[0]
        return f"export {var}=<your key> (or set api_key in the file), then run doctor again"
    if "no configuration" in message:
        return (
            f"pass --config FILE, set {CONFIG_ENV}, or write ./cursor-byok.toml with "
            "`cursor-byok init`"
        )
    if "cannot read configuration" in message:
        return "check the path; `cursor-byok init PATH` writes a starter file"
    if "not valid TOML" in message:
        return "fix the TOML syntax at the position named in the detail"
    if "unknown key; did you mean " in message:
        return f"rename the key to {message.rsplit('did you mean ', 1)[1].rstrip('?')}"
    return "fix the key named in the detail (see the comments of `cursor-byok init`'s file)"


def check_config(path: str | None, env: dict[str, str]) -> tuple[Config | None, list[Check]]:
    try:
        config = load_config(path, env=env)
    except ConfigError as exc:
        rows = [Check("config", "FAIL", line, _config_next_step(line)) for line in exc.lines()]
        for row, after in itertools.pairwise(rows):
            if row.next_step == after.next_step:
                row.next_step = ""  # the same advice once, after the last of its mistakes
        return None, rows
    where = config.path or "config"
    rows = [
        Check(
            "config",
            "OK",
            f"{where}: {len(config.providers)} provider(s), {len(config.models)} model(s)",
        )
    ]
    if not config.models:
        rows.append(
            Check(
                "models",
                "FAIL",
                "no models configured: clients would show an empty model list",
                'add a [models.<id>] section with provider = "<a provider>"',
            )
        )
    else:
        rows.append(Check("models", "OK", ", ".join(config.models)))
    rows.extend(_web_rows(config))
    return config, rows


def _web_rows(config: Config) -> list[Check]:
    """What the web tools are set to, when the configuration says anything about them. No
    request is made: an image costs money."""
    rows: list[Check] = []
    fetch = config.web_fetch
    if fetch.server_side:
        reach = "public addresses only"
        if fetch.allowed_networks:
            reach = f"public addresses and {', '.join(fetch.allowed_networks)}"
        rows.append(
            Check(
                "web fetch",
                "WARN" if fetch.allowed_networks else "OK",
                f"server-side fetch on for clients that cannot fetch: {reach}, "
                f"at most {fetch.max_bytes} bytes, {fetch.timeout_s:g} s and "
                f"{fetch.max_redirects} redirects a page",
            )
        )
    image = config.image_generation
    if image is not None:
        base = config.providers[image.provider].base_url
        rows.append(
            Check(
                "images",
                "OK",
                f"GenerateImage offered: model {image.model} at {base}/images/generations "
                f"(provider {image.provider}, {image.timeout_s:g} s); not tried, an image costs",
            )
        )
    return rows


def _api_key_envs(config: Config) -> dict[str, str]:
    """provider name -> api_key_env, read back from the file (Config keeps only the key)."""
    if not config.path:
        return {}
    try:
        raw = msgspec.toml.decode(Path(config.path).read_bytes(), type=RawConfig)
    except (OSError, msgspec.MsgspecError):
        return {}
    return {name: p.api_key_env for name, p in raw.providers.items() if p.api_key_env}


# -- database ------------------------------------------------------------------------------


def _integrity(path: str) -> tuple[int, str, int | None]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        rows = conn.execute("PRAGMA integrity_check").fetchall()
        result = "; ".join(str(r[0]) for r in rows[:5])
        try:
            count = int(conn.execute("SELECT count(*) FROM conversations").fetchone()[0])
        except sqlite3.Error:
            count = None
        return version, result, count
    finally:
        conn.close()


async def check_postgres(url: str) -> Check:
    """Connect, migrate if needed (as `serve` would) and report the schema version."""
    name = "database"
    shown = display_name(url)
    try:
        store = await PostgresStore.open(url, connections=1)
    except BackendMissingError as exc:
        return Check(name, "FAIL", str(exc), f"{INSTALL_POSTGRES}, or use a SQLite file")
    except StoreSchemaError as exc:
        return Check(
            name,
            "FAIL",
            f"schema problem: {exc}",
            "a newer cursor-byok wrote it: upgrade cursor-byok, or use another database",
        )
    except StoreError as exc:
        return Check(
            name,
            "FAIL",
            f"cannot use {shown}: {exc.cause} ({exc.detail})",
            "check that the server runs, the URL, the user's password and its rights",
        )
    try:
        version = store.schema_version
        await store.list_conversations(limit=1)  # the tables answer to this user
    except StoreError as exc:
        return Check(name, "FAIL", f"cannot read {shown}: {exc}", "check the user's rights")
    finally:
        await store.close()
    latest = latest_version(load_migrations("postgresql"))
    return Check(name, "OK", f"{shown}: PostgreSQL, schema v{version} (latest {latest})")


async def check_database(path: str) -> Check:
    name = "database"
    if is_postgres_url(path):
        return await check_postgres(path)
    p = Path(path)
    if not p.exists():
        parent = p.resolve().parent
        if parent.exists() and not parent.is_dir():
            return Check(
                name,
                "FAIL",
                f"{path}: {parent} is a file, not a folder",
                "point server.database (or --db) at a file in a folder",
            )
        if not parent.is_dir():
            return Check(
                name,
                "FAIL",
                f"{path}: folder {parent} does not exist",
                f"create {parent} or point server.database (or --db) elsewhere",
            )
        if not os.access(parent, os.W_OK):
            return Check(
                name,
                "FAIL",
                f"{path}: folder {parent} is not writable",
                "fix the folder's permissions or point server.database elsewhere",
            )
        return Check(name, "WARN", f"{path} does not exist yet", "`serve` creates it at start")
    try:
        store = await SQLiteStore.open(path)
    except StoreCorruptError as exc:
        return Check(
            name,
            "FAIL",
            f"not a usable database: {exc}",
            f"move {path} aside (keep it if it holds history) and let `serve` create a new one",
        )
    except StoreSchemaError as exc:
        return Check(
            name,
            "FAIL",
            f"schema problem: {exc}",
            "a newer cursor-byok wrote it: upgrade cursor-byok, or use another database file",
        )
    except StoreLockedError as exc:
        return Check(name, "FAIL", f"locked: {exc}", "another process holds it; stop it and retry")
    except StoreIOError as exc:
        return Check(name, "FAIL", f"cannot open: {exc}", "check the file's permissions and disk")
    except StoreError as exc:
        return Check(name, "FAIL", f"cannot open: {exc}", "check the file and its permissions")
    try:
        await store.close()
        version, result, count = await asyncio.to_thread(_integrity, store.path)
    except sqlite3.Error as exc:
        return Check(
            name, "FAIL", f"{path}: {exc}", "move the file aside and let `serve` create a new one"
        )
    latest = latest_version()
    if result != "ok":
        return Check(
            name,
            "FAIL",
            f"{path}: schema v{version}, integrity check failed: {result}",
            f"stop the server, back up {path}, then restore a backup or move it aside",
        )
    conversations = "" if count is None else f", {count} conversation(s)"
    return Check(
        name, "OK", f"{path}: schema v{version} (latest {latest}), integrity ok{conversations}"
    )


async def check_tokens(config: Config, path: str) -> list[Check]:
    """The active tokens and their spend, the access mode, and each token that can call
    nothing (token_report.findings); nothing to say before the database exists."""
    if not is_postgres_url(path) and not Path(path).exists():
        return [Check("tokens", "SKIP", "no database yet, so no tokens")]
    try:
        store = await open_store(path)
        try:
            report = await read_report(store)
        finally:
            await store.close()
    except StoreError as exc:
        return [Check("tokens", "SKIP", f"cannot read them: {exc}")]
    return [Check(f.name, f.status, f.detail, f.next_step) for f in findings(report, config)]


# -- providers -----------------------------------------------------------------------------


def _first_model_per_provider(config: Config) -> dict[str, Model]:
    out: dict[str, Model] = {}
    for model in config.models.values():
        out.setdefault(model.provider.name, model)
    return out


def _failure_step(
    event: ErrorEvent, model: Model, key_env: str | None, base_url: str
) -> tuple[str, str]:
    """(short cause, next step) for a failed ping."""
    status = event.http_status
    text = event.error_message
    provider = model.provider.name
    where_key = f"${key_env}" if key_env else f"providers.{provider}.api_key"
    if status in (401, 403):
        return (
            "the provider refused the credentials",
            f"check the key in {where_key} (and that it may use {model.settings.model!r})",
        )
    if status == 404:
        return (
            "not found",
            f"check models.{model.id}.model ({model.settings.model!r}) and "
            f"providers.{provider}.base_url ({base_url})",
        )
    if status == 429:
        return "rate limited or out of quota", "check the account's quota and billing, then retry"
    if status in (400, 422):
        return (
            "the provider rejected the request",
            f"check models.{model.id} options (model name, extra_body, reasoning settings)",
        )
    if status is not None and status >= 500:
        return "the provider failed", "a provider-side error: retry later"
    if "go only through http:// or https:// proxies" in text:  # llm/upstream.py
        return (
            "the proxy cannot be used",
            "point HTTPS_PROXY / HTTP_PROXY at an http:// proxy, or unset the SOCKS one",
        )
    if "could not connect" in text or "timed out connecting" in text:
        return "no connection", f"is the server at {base_url} running and reachable?"
    if status is not None:
        return f"HTTP {status}", f"check providers.{provider} and models.{model.id}"
    return "the stream failed", f"check providers.{provider}.base_url ({base_url}) and its api"


async def _ping(model: Model, timeout_s: float) -> tuple[DoneEvent | ErrorEvent | None, int]:
    adapter = ADAPTERS[model.provider.api](model.provider)
    settings = msgspec.structs.replace(model.settings, max_output_tokens=PING_MAX_OUTPUT_TOKENS)
    t0 = time.monotonic()
    stream = adapter.call(PING, settings)

    async def consume() -> DoneEvent | ErrorEvent:
        while True:
            event = await stream.recv()
            if isinstance(event, DoneEvent | ErrorEvent):
                return event

    try:
        try:
            result: DoneEvent | ErrorEvent | None = await asyncio.wait_for(consume(), timeout_s)
        except TimeoutError:
            result = None
        return result, int((time.monotonic() - t0) * 1000)
    finally:
        await stream.aclose()
        await adapter.aclose()


async def check_provider(
    model: Model, timeout_s: float, key_env: str | None, secrets: Sequence[str]
) -> Check:
    provider = model.provider
    name = f"provider {provider.name}"
    base_url = provider.base_url
    try:
        event, ms = await _ping(model, timeout_s)
    except Exception as exc:  # an adapter bug must show as a failed check, not a traceback
        return Check(
            name,
            "FAIL",
            redact_text(f"{type(exc).__name__}: {exc}", secrets),
            "report this as a bug in cursor-byok",
        )
    if event is None:
        return Check(
            name,
            "FAIL",
            f"no answer from {base_url} within {timeout_s:g} s (model {model.settings.model!r})",
            f"is {base_url} reachable? slow local models: raise --timeout",
        )
    if isinstance(event, DoneEvent):
        usage = event.message.usage
        return Check(
            name,
            "OK",
            f"{model.id} -> {model.settings.model!r} answered in {ms} ms "
            f"({usage.input} in / {usage.output} out tokens)",
        )
    cause, step = _failure_step(event, model, key_env, base_url)
    detail = redact_text(f"{cause}: {event.error_message}", secrets)
    return Check(name, "FAIL", detail, redact_text(step, secrets))


# -- web search ----------------------------------------------------------------------------

SEARCH_PING = WebSearchJob(query="cursor-byok")  # a tiny search; one result is enough


async def check_search_backend(backend: SearchBackend, used_by: str) -> Check:
    name = f"search {backend.name}"
    t0 = time.monotonic()
    try:
        outcome = await backend.search(SEARCH_PING, 1)
    except Exception as exc:  # a backend bug must show as a failed check, not a traceback
        return Check(name, "FAIL", f"{type(exc).__name__}: {exc}", "report this as a bug")
    ms = int((time.monotonic() - t0) * 1000)
    if isinstance(outcome, SearchResults):
        found = f"{len(outcome.hits)} result(s)" if outcome.hits else "no results"
        return Check(name, "OK", f"answered in {ms} ms ({found}); {used_by}")
    return Check(
        name,
        "FAIL",
        outcome.message,
        f"check web_search.backend.{backend.name} (its url, its key's variable) and that the "
        "service is reachable from this machine",
    )


def _used_by(search: WebSearch, name: str) -> str:
    settings = search.settings
    users = ["server-wide"] if name in settings.order else []
    users += [f"model {m}" for m, order in settings.per_model.items() if name in order]
    return f"used {', '.join(users)}" if users else "listed by no backend list"


async def check_web_search(config: Config) -> list[Check]:
    settings = config.web_search
    if not settings.backends:
        return [Check("web search", "SKIP", "no [web_search] backend: WebSearch is not offered")]
    registry = LLMRegistry()  # a provider's own search runs over its adapter
    try:
        search = WebSearch(settings, registry=registry)
        return list(
            await asyncio.gather(
                *(
                    check_search_backend(backend, _used_by(search, name))
                    for name, backend in search.backends.items()
                )
            )
        )
    finally:
        await registry.aclose()


# -- the address ---------------------------------------------------------------------------


def check_listen(host: str, port: int) -> Check:
    """Whether `serve` could listen on server.host:server.port right now."""
    from .launch import ListenError, bind_address

    name = "address"
    try:
        address = bind_address(host, port)
    except ListenError as exc:
        return Check(name, "FAIL", str(exc), "set server.host to an IP address such as 127.0.0.1")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((address, port))
    except OSError as exc:
        where = f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            return Check(
                name,
                "WARN",
                f"{where} is in use (a cursor-byok server already running?)",
                "stop what listens there, or choose another server.port (or --port)",
            )
        if exc.errno == errno.EACCES:
            return Check(name, "FAIL", f"{where}: permission denied", "choose a port from 1024 up")
        return Check(name, "FAIL", f"{where}: {exc.strerror}", "check server.host and server.port")
    return Check(name, "OK", f"{host}:{port} is free")


# -- the command ---------------------------------------------------------------------------


async def run_checks(
    config_path: str | None,
    *,
    database: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> list[Check]:
    env = dict(os.environ) if env is None else env
    config, rows = check_config(config_path, env)
    if config is None:
        rows.append(Check("address", "SKIP", "needs a valid config"))
        rows.append(Check("database", "SKIP", "needs a valid config"))
        rows.append(Check("providers", "SKIP", "needs a valid config"))
        return rows
    secrets = secrets_of(config, database)
    rows.append(check_listen(config.server.host, config.server.port))
    path = database or config.server.database
    moved = moved_database(config) if database is None else None
    if moved is not None:
        rows.append(Check("database", "FAIL", moved, "move the file, or set server.database"))
    else:
        rows.append(await check_database(path))
        if rows[-1].status != "FAIL":
            size = size_row(await measured_size(path), config.server.database_max_mib)
            rows.append(Check("database size", *size))
            rows.extend(await check_tokens(config, path))
    key_envs = _api_key_envs(config)
    firsts = _first_model_per_provider(config)
    for provider in config.providers.values():
        if provider.name not in firsts:
            rows.append(
                Check(
                    f"provider {provider.name}",
                    "WARN",
                    "no model uses this provider; not checked",
                    f"add a model with provider = {provider.name!r}, or remove the provider",
                )
            )
    results = await asyncio.gather(
        *(
            check_provider(model, timeout_s, key_envs.get(name), secrets)
            for name, model in firsts.items()
        )
    )
    rows.extend(results)
    rows.extend(Check(*row) for row in await local_window_rows(config, min(timeout_s, 5.0)))
    rows.extend(await check_web_search(config))
    for row in rows:
        row.detail = redact_text(row.detail, secrets)
    return rows


def format_table(rows: Sequence[Check], width: int = WIDTH) -> str:
    """The rows as a table no wider than `width`: the detail and then the next step wrap
    under the DETAIL column; a check name too long for its column gets a line of its own."""
    name_w = min(max(len(r.name) for r in (Check("CHECK", "OK", ""), *rows)), NAME_COLUMN)
    status_w = len("STATUS")
    indent = " " * (name_w + 2 + status_w + 2)
    text_w = width - len(indent)
    lines = [f"{'CHECK'.ljust(name_w)}  STATUS  DETAIL"]
    for row in rows:
        body = _wrap(row.detail, text_w)
        if row.next_step:
            body += _wrap(f"next step: {row.next_step}", text_w)
        name = row.name
        if len(name) > name_w:
            lines.append(name if len(name) <= width else name[: width - 1] + "…")
            name = ""
        lines.append(f"{name.ljust(name_w)}  {row.status.ljust(status_w)}  {body[0]}".rstrip())
        lines.extend(f"{indent}{part}" for part in body[1:])
    return "\n".join(lines)


def _wrap(text: str, width: int) -> list[str]:
    # Not on hyphens: model names and URLs hold them. A word longer than a line (a long URL)
    # gets lines of its own, cut at the width, so no line is wider than the table.
    lines = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)
    return [line[i : i + width] for line in lines for i in range(0, len(line), width)] or [""]


def doctor(
    config_path: str | None,
    *,
    database: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    out: TextIO | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Run every check, print the table; 0 when nothing failed, 1 otherwise."""
    out = out or sys.stdout
    rows = asyncio.run(run_checks(config_path, database=database, timeout_s=timeout_s, env=env))
    print(format_table(rows), file=out)
    failed = [r for r in rows if r.status == "FAIL"]
    if failed:
        print(f"\n{len(failed)} check(s) failed.", file=out)
        return 1
    print("\nAll checks passed.", file=out)
    return 0
