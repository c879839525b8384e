"""Configuration: one TOML file, validated at start-up with one clear message per mistake.

Secrets are read from the environment (`api_key_env`) or the file (`api_key`), kept on the
provider settings only, and never printed: `repr` of every config object leaves them out.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import msgspec

from .config_files import CONFIG_ENV as CONFIG_ENV
from .config_files import LOCAL_CONFIG as LOCAL_CONFIG
from .config_files import beside_config as beside_config
from .config_files import find_config as find_config
from .config_files import port_number as port_number
from .config_files import user_config_path as user_config_path
from .config_limits import run_limit_errors
from .config_shape import Shape, check_shape, key_path, number_errors
from .config_web import (
    ImageGenerationConfig,
    WebFetchConfig,
    WebSearchConfig,
    unknown_provider,
    web_errors,
    web_search_settings,
)
from .llm.model_names import ModelNames, NameClash, Resolved, Unknown, UnknownDefault, Via
from .llm.models import Model, Prices, picker_efforts
from .llm.settings import Api, ModelSettings, ProviderSettings, ReasoningEffort
from .loop.catalogue import TOOLS, TOOLS_BY_NAME, Gate
from .model_defaults import CatalogueError, is_loopback, model_defaults
from .web.search.settings import WebSearchSettings

__all__ = [
    "CONFIG_ENV",
    "Config",
    "ConfigError",
    "ImageGenerationConfig",
    "Model",
    "Prices",
    "ServerConfig",
    "WebFetchConfig",
    "is_loopback",
    "load_config",
    "parse_config",
    "port_number",
]

LOG_LEVELS = ("debug", "info", "warning", "error")
APIS: tuple[str, ...] = tuple(a for a in get_args(Api) if a != "faux")
EFFORTS: tuple[str, ...] = get_args(ReasoningEffort)


class ConfigError(ValueError):
    """Configuration mistakes, one message each naming the offending key; str() is one line
    per mistake, each prefixed with the file's path."""

    def __init__(self, *problems: str, path: str | None = None) -> None:
        self.problems = problems
        self.path = path
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        where = f"{self.path}: " if self.path else ""
        return [f"{where}{problem}" for problem in self.problems]


class ServerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8700
    database: str = "cursor-byok.db"
    auth_token: str | None = None
    http2: bool = True  # what GetServerConfig tells clients about HTTP/2
    certificate: str | None = None
    private_key: str | None = None
    runsse_content_type: str = "text/event-stream"
    log_format: str = "text"
    log_level: str = "info"  # debug, info, warning or error
    tool_timeout_s: float = 600.0  # a tool the client never answers becomes an error result
    # An AskQuestion form or a SwitchMode approval waits on a person: its own, longer bound.
    question_timeout_s: float = 1800.0
    # true: fsync the commit before every model call too (power-loss safe; the disk's fsync
    # time is added to every first token). false: that commit survives a crash of the server
    # at once and a power loss from the next tool or end-of-turn commit on.
    fsync_model_calls: bool = False
    # HTTP/2 streams (runs) one client connection may have open at once.
    http2_max_concurrent_streams: int = 1024
    # The model for a name no model or alias answers to (the IDE's `default`/Auto, a client's
    # remembered name). A model id or alias; after loading always the model's id.
    default_model: str | None = None
    # Seconds the integrity check of the database at start may take; past them the server
    # starts with a warning (`cursor-byok doctor` runs the full check). 0 skips it.
    start_check_s: float = 2.0
    # What the server holds in memory for runs (docs/operations.md, "Limits and deadlines").
    run_held_appends_mib: int = 64  # out-of-order appends held for one run
    run_output_mib: int = 256  # one run's output, kept for a RunSSE that reconnects
    runs_memory_mib: int = 1024  # every run together: held appends, output, 16 KiB per run
    unstarted_run_timeout_s: float = 10.0  # a run whose first message has not come is dropped
    unstarted_runs_per_client: int = 64  # such runs one client (peer address) may have
    unstarted_mib_per_client: int = 128  # what they may hold
    # A shim run whose RunSSE dropped keeps its turn (and model call) this long for the
    # client to reconnect (design §14.2); then the turn is canceled and the call ended.
    reconnect_grace_s: float = 60.0
    # Catalogue tools (docs/tools.md) never offered to the model, in any mode.
    disabled_tools: list[str] = []
    enabled_tools: list[str] = []  # opt-in tools to offer (WriteShellStdin)
    # Compaction starts when the next request would pass this share of the model's window
    # (per model: [models.X] compaction_threshold).
    compaction_threshold: float = 0.9
    # How deep helpers (Task) may nest: a child at this depth is not offered Task.
    subagent_max_depth: int = 2
    # The model that names chats when a client asks (NameAgent); None: the first words of
    # the person's own message. On a timeout or failure the text rule answers.
    title_model: str | None = None
    title_timeout_s: float = 10.0
    # How long an access token handed to a signed-in client lives (docs/clients.md).
    access_token_ttl_s: int = 3600
    # Server processes on the one port, each with its own event loop (workers.py); > 1 needs
    # PostgreSQL (docs/deploy.md, "Workers").
    workers: int = 1
    # The database's size cap (0: none): past it new runs are refused, `unavailable` "storage
    # full" (SQLite: max_page_count; PostgreSQL: its size polled, store/postgres/size.py).
    database_max_mib: int = 0
    # CIDRs of the reverse proxies in front: from them, a request's client (for the per-client
    # limits) is the rightmost X-Forwarded-For hop outside these (transport/connect/clients.py).
    trusted_proxies: list[str] = []

    def __repr__(self) -> str:
        token = "set" if self.auth_token else "unset"
        return f"ServerConfig(host={self.host!r}, port={self.port}, auth_token={token})"


class ProviderConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    api: str
    base_url: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    headers: dict[str, str] = {}
    catalogue: str | None = None  # the model catalogue's provider id ("": none); model_defaults
    local: bool | None = None  # bills nothing (prices $0); default: its base_url is loopback
    connect_timeout_s: float = 30.0
    read_timeout_s: float = 300.0
    first_output_timeout_s: float = 300.0
    idle_timeout_s: float = 120.0

    def __repr__(self) -> str:
        return f"ProviderConfig(api={self.api!r}, base_url={self.base_url!r})"


class ModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    provider: str
    model: str | None = None  # upstream name; defaults to the model id
    name: str | None = None  # display name shown by clients
    context_window: int | None = None  # the catalogue's, else 128,000 (model_defaults.py)
    max_output_tokens: int | None = None
    reasoning: bool = False
    reasoning_effort: str | None = None
    reasoning_budget: int | None = None
    # The efforts the IDE's thinking picker offers (None: low, medium, high for a reasoning
    # model, none otherwise); each one of EFFORTS.
    efforts: list[str] | None = None
    temperature: float | None = None
    extra_body: dict[str, Any] = {}
    extra_headers: dict[str, str] = {}
    prices: Prices | None = None  # the catalogue's, else zero on loopback, else none
    catalogue: str | None = None  # the catalogue's name of the model ("": none); exact
    aliases: list[str] = []  # other names clients may ask for; unique across all models
    vision: bool = (
        False  # reads images: AvailableModels says supports_images, so the IDE sends them
    )
    # For a model without vision: another [models.Y] (id or alias, with vision = true) that
    # describes a pasted image, the description standing in for it (loop/images.py).
    vision_model: str | None = None
    # This model's own ordered list of [web_search.backend.NAME]s (else web_search.backends).
    web_search: list[str] | None = None
    # Models (ids or aliases) tried in order when a call fails before its first output.
    fallbacks: list[str] = []

    # Compaction: the share of the window that starts it (None: server.compaction_threshold)
    # and the model that writes the summary (another [models.Y] id; None: this model).
    compaction_threshold: float | None = None
    compaction_model: str | None = None


class RawConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    server: ServerConfig = ServerConfig()
    providers: dict[str, ProviderConfig] = {}
    models: dict[str, ModelConfig] = {}
    web_search: WebSearchConfig = WebSearchConfig()
    web_fetch: WebFetchConfig = WebFetchConfig()
    image_generation: ImageGenerationConfig | None = None


DEFAULT_BASE_URLS = {
    "openai-chat": "https://api.openai.com/v1",
    "openai-responses": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com/v1beta",
}


class Config(msgspec.Struct, frozen=True):
    server: ServerConfig
    providers: dict[str, ProviderSettings]
    models: dict[str, Model]
    path: str | None = None
    web_search: WebSearchSettings = WebSearchSettings()
    web_fetch: WebFetchConfig = WebFetchConfig()
    image_generation: ImageGenerationConfig | None = None
    # server.database as written, when it was a relative SQLite path (server.database is then
    # that path resolved against the file's folder): for the hint when an old database sits
    # where the working directory would have put it.
    relative_database: str | None = None

    def model(self, model_id: str) -> Model | None:
        return self.models.get(model_id)

    def model_names(self) -> ModelNames:
        """The resolver every model name a client sends goes through."""
        return ModelNames(self.models.values(), self.server.default_model)


def _validation_message(exc: msgspec.ValidationError) -> str:
    # msgspec says e.g. "Object contains unknown field `x` - at `$.providers.openai`".
    return str(exc).replace("$.", "").replace("`$`", "the top level")


def parse_config(
    text: str | bytes, *, env: dict[str, str] | None = None, path: str | None = None
) -> Config:
    """The configuration in `text`; a ConfigError lists every mistake found, not the first.

    Each table is checked by its own function, in the file's table order: [server],
    [providers.*], [models.*], then the web tables (config_web.py). Every mistake of every
    table is collected before the error is raised; only the model names (aliases, the default
    model, fallbacks) are resolved after, on a configuration without other mistakes."""
    env = dict(os.environ) if env is None else env
    raw, shape = _read(text, path)
    errors = shape.problems
    server = raw.server
    errors += _server_errors(server)
    # Providers with a mistake already reported: a model naming one is not a second mistake.
    broken = {name for parent, name in shape.dropped if parent == "providers"}
    providers = _providers(raw.providers, env, errors, broken)
    models = _models(raw, providers, broken, errors)
    web_search = web_search_settings(
        raw.web_search,
        {model_id: m.web_search for model_id, m in raw.models.items()},
        raw.providers,
        env,
        errors,
        providers,
        frozenset(broken),
    )
    errors += web_errors(raw.web_fetch, raw.image_generation, raw.providers, providers, broken)
    errors += number_errors(shape, errors)
    if errors:
        raise ConfigError(*errors, path=path)
    server, models = _resolve_names(raw, server, models, path)
    database = beside_config(server.database, path)
    relative = server.database if database != server.database else None
    return Config(
        server=msgspec.structs.replace(server, database=database),
        providers=providers,
        models=models,
        path=path,
        web_search=web_search,
        web_fetch=raw.web_fetch,
        image_generation=raw.image_generation,
        relative_database=relative,
    )


def _read(text: str | bytes, path: str | None) -> tuple[RawConfig, Shape]:
    """The TOML text as the tables' Structs, with the shape's mistakes (unknown keys, wrong
    types) in `Shape.problems` and what they concern left out."""
    try:
        data = tomllib.loads(text if isinstance(text, str) else text.decode())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    except UnicodeDecodeError:
        raise ConfigError("not valid TOML: the file is not UTF-8 text", path=path) from None
    shape = check_shape(data, RawConfig)
    try:
        raw = msgspec.convert(shape.cleaned, RawConfig)
    except msgspec.ValidationError as exc:  # a mistake the walk does not know; not expected
        raise ConfigError(*shape.problems, _validation_message(exc), path=path) from None
    return raw, shape


def _server_errors(server: ServerConfig) -> list[str]:
    """The mistakes of [server]."""
    errors: list[str] = []
    if not 0 < server.port < 65536:
        errors.append(f"server.port must be 1-65535, got {server.port}")
    if not is_loopback(server.host) and not server.auth_token:
        errors.append(
            f"server.auth_token is required when server.host is not loopback "
            f"({server.host!r}); set a token or bind to 127.0.0.1"
        )
    if bool(server.certificate) != bool(server.private_key):
        errors.append("server.certificate and server.private_key go together")
    if not 0 < server.tool_timeout_s <= 86400:
        errors.append("server.tool_timeout_s must be between 0 and 86400 seconds")
    if not 0 < server.title_timeout_s <= 300:
        errors.append("server.title_timeout_s must be between 0 and 300 seconds")
    if not 60 <= server.access_token_ttl_s <= 86400 * 30:
        errors.append("server.access_token_ttl_s must be between 60 and 2592000 seconds")
    if not 0.1 <= server.compaction_threshold <= 1.0:
        errors.append("server.compaction_threshold must be between 0.1 and 1.0")
    if not 1 <= server.subagent_max_depth <= 8:
        errors.append("server.subagent_max_depth must be between 1 and 8")
    if not 0 < server.question_timeout_s <= 86400:
        errors.append("server.question_timeout_s must be between 0 and 86400 seconds")
    if not 0 <= server.start_check_s <= 86400:
        errors.append("server.start_check_s must be between 0 and 86400 seconds")
    if not 1 <= server.http2_max_concurrent_streams <= 100_000:
        errors.append("server.http2_max_concurrent_streams must be 1-100000")
    for cidr in server.trusted_proxies:
        try:
            ipaddress.ip_network(cidr.strip(), strict=False)
        except ValueError:
            errors.append(f"server.trusted_proxies: {cidr!r} is not a CIDR (127.0.0.1/32)")
    if server.log_format not in ("text", "json"):
        errors.append("server.log_format must be 'text' or 'json'")
    if server.log_level.lower() not in LOG_LEVELS:
        errors.append(f"server.log_level must be one of {', '.join(LOG_LEVELS)}")
    errors += run_limit_errors(server)
    opt_in = [t.name for t in TOOLS if Gate.CONFIG_ENABLED_TOOLS in t.gates]
    if wrong := [n for n in server.enabled_tools if n not in opt_in]:
        errors.append(
            f"server.enabled_tools: {wrong} cannot be switched on; the opt-in tools are "
            f"{', '.join(opt_in)} (every other built tool is on unless server.disabled_tools "
            "names it)"
        )
    if unknown := [n for n in server.disabled_tools if n not in TOOLS_BY_NAME]:
        errors.append(
            f"server.disabled_tools: unknown tool(s) {unknown}; the catalogue's tools are "
            f"{', '.join(TOOLS_BY_NAME)}"
        )
    return errors


def _providers(
    raw_providers: Mapping[str, ProviderConfig],
    env: Mapping[str, str],
    errors: list[str],
    broken: set[str],
) -> dict[str, ProviderSettings]:
    """[providers.*] as settings; a provider with a mistake is left out and added to `broken`."""
    providers: dict[str, ProviderSettings] = {}
    for name, p in raw_providers.items():
        key = key_path("providers", name)
        if p.api not in APIS:
            errors.append(f"{key}.api: unknown api {p.api!r}; use one of {list(APIS)}")
            broken.add(name)
            continue
        deadlines = ("first_output_timeout_s", "idle_timeout_s")
        if bad := [f for f in deadlines if not 0 < getattr(p, f) <= 86400]:
            errors.extend(f"{key}.{f} must be between 0 and 86400 seconds" for f in bad)
            broken.add(name)
            continue
        api_key = p.api_key
        if api_key is None and p.api_key_env:
            api_key = env.get(p.api_key_env)
            if not api_key:
                errors.append(f"{key}.api_key_env: environment variable {p.api_key_env} is not set")
                broken.add(name)
                continue
        base_url = (p.base_url or DEFAULT_BASE_URLS[p.api]).rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            errors.append(f"{key}.base_url must start with http:// or https://")
            broken.add(name)
            continue
        if api_key is None and base_url in DEFAULT_BASE_URLS.values():
            errors.append(f"{key}: set api_key_env (or api_key) for {base_url}")
            broken.add(name)
            continue
        providers[name] = ProviderSettings(
            name=name,
            api=p.api,  # type: ignore[arg-type]
            base_url=base_url,
            api_key=api_key,
            headers=p.headers,
            connect_timeout_s=p.connect_timeout_s,
            read_timeout_s=p.read_timeout_s,
            first_output_timeout_s=p.first_output_timeout_s,
            idle_timeout_s=p.idle_timeout_s,
        )
    return providers


def _models(
    raw: RawConfig,
    providers: Mapping[str, ProviderSettings],
    broken: set[str],
    errors: list[str],
) -> dict[str, Model]:
    """[models.*] as models of the loaded `providers`; a model with a mistake is left out."""
    models: dict[str, Model] = {}
    for model_id, m in raw.models.items():
        key = key_path("models", model_id)
        found = len(errors)
        if m.provider not in providers and m.provider not in broken:
            errors.append(f"{key}.provider: {unknown_provider(m.provider, raw.providers)}")
        if m.reasoning_effort is not None and m.reasoning_effort not in EFFORTS:
            errors.append(f"{key}.reasoning_effort must be one of {list(EFFORTS)}")
        if m.efforts is not None and any(e not in EFFORTS for e in m.efforts):
            errors.append(f"{key}.efforts: each must be one of {list(EFFORTS)}")
        if m.max_output_tokens is not None and m.max_output_tokens <= 0:
            errors.append(f"{key}.max_output_tokens must be positive")
        if any(not a.strip() for a in m.aliases):
            errors.append(f"{key}.aliases: an alias must not be empty")
        threshold = (
            m.compaction_threshold
            if m.compaction_threshold is not None
            else raw.server.compaction_threshold
        )
        if m.compaction_threshold is not None and not 0.1 <= threshold <= 1.0:
            errors.append(f"{key}.compaction_threshold must be between 0.1 and 1.0")
        if m.compaction_model is not None and m.compaction_model not in raw.models:
            errors.append(
                f"{key}.compaction_model: {m.compaction_model!r} is not a model of this "
                "configuration"
            )
        if len(errors) > found or m.provider not in providers:
            continue
        try:
            defaults = model_defaults(
                base_url=providers[m.provider].base_url,
                upstream=m.model or model_id,
                provider_catalogue=raw.providers[m.provider].catalogue,
                local=raw.providers[m.provider].local,
                catalogue=m.catalogue,
                prices=m.prices,
                context_window=m.context_window,
            )
        except CatalogueError as exc:
            errors.append(f"{key}.catalogue: {exc}")
            continue
        entry = defaults.entry
        settings = ModelSettings(
            model=m.model or model_id,
            max_output_tokens=m.max_output_tokens,
            reasoning=m.reasoning,
            reasoning_effort=m.reasoning_effort,  # type: ignore[arg-type]
            reasoning_budget=m.reasoning_budget,
            temperature=m.temperature,
            extra_body=m.extra_body,
            extra_headers=m.extra_headers,
        )
        models[model_id] = Model(
            id=model_id,
            display_name=m.name or model_id,
            provider=providers[m.provider],
            settings=settings,
            context_window=defaults.context_window,
            prices=defaults.prices,
            prices_source=defaults.prices_source,
            context_source=defaults.context_source,
            catalogue=f"{entry.key} ({entry.source})" if entry is not None else "",
            catalogue_note=entry.note if entry is not None else "",
            aliases=tuple(m.aliases),
            vision=m.vision,
            efforts=picker_efforts(m.reasoning, m.efforts),
            compaction_threshold=threshold,
            compaction_model=m.compaction_model,
        )
    return models


def _resolve_names(
    raw: RawConfig, server: ServerConfig, models: dict[str, Model], path: str | None
) -> tuple[ServerConfig, dict[str, Model]]:
    """The model names resolved: aliases unique, `server.default_model` as a model id, each
    model's fallbacks as model ids."""
    try:
        names = ModelNames(models.values(), server.default_model)
    except NameClash as exc:
        raise ConfigError(f"{key_path('models', exc.model_id)}.aliases: {exc}", path=path) from None
    except UnknownDefault as exc:
        served = ", ".join(exc.unknown.served) or "none are configured"
        raise ConfigError(
            f"server.default_model: {server.default_model!r} is not a served model id "
            f"or alias; this server offers: {served}",
            path=path,
        ) from None
    if names.default is not None:
        server = msgspec.structs.replace(server, default_model=names.default.id)
    if server.title_model is not None:
        title = names.resolve(server.title_model)
        if not isinstance(title, Resolved) or title.via is Via.DEFAULT:
            served = ", ".join(m.id for m in models.values()) or "none are configured"
            raise ConfigError(
                f"server.title_model: {server.title_model!r} is not a served model id or "
                f"alias; this server offers: {served}",
                path=path,
            )
        server = msgspec.structs.replace(server, title_model=title.model.id)
    models = _with_fallbacks(raw, models, names, path)
    models = _with_vision_models(raw, models, names, path)
    return server, models


def _with_vision_models(
    raw: RawConfig, models: dict[str, Model], names: ModelNames, path: str | None
) -> dict[str, Model]:
    """Each model's `vision_model` resolved to a model id: a served model (never the default
    standing in for an unknown name) that reads images, not the model itself."""
    errors: list[str] = []
    out = dict(models)
    for model_id, m in raw.models.items():
        if m.vision_model is None or model_id not in models:
            continue
        key = f"{key_path('models', model_id)}.vision_model"
        found = names.resolve(m.vision_model, use_default=False)
        if isinstance(found, Unknown):
            errors.append(f"{key}: {found.message()}")
        elif found.model.id == model_id:
            errors.append(f"{key}: {m.vision_model!r} is this model itself")
        elif not found.model.vision:
            errors.append(
                f"{key}: {m.vision_model!r} has no `vision = true`, so it cannot read images"
            )
        else:
            out[model_id] = msgspec.structs.replace(models[model_id], vision_model=found.model.id)
    if errors:
        raise ConfigError(*errors, path=path)
    return out


def _with_fallbacks(
    raw: RawConfig, models: dict[str, Model], names: ModelNames, path: str | None
) -> dict[str, Model]:
    """Each model's `fallbacks` resolved to model ids: served names only (never the default
    model standing in for an unknown one), not the model itself, no repeats. A chain is flat
    (a fallback's own fallbacks are not followed), so models that name each other are fine."""
    errors: list[str] = []
    out = dict(models)
    for model_id, m in raw.models.items():
        if not m.fallbacks or model_id not in models:
            continue
        key = f"{key_path('models', model_id)}.fallbacks"
        chain: list[str] = []
        for name in m.fallbacks:
            found = names.resolve(name, use_default=False)
            if isinstance(found, Unknown):
                errors.append(f"{key}: {found.message()}")
            elif found.model.id == model_id:
                errors.append(f"{key}: {name!r} is this model itself")
            elif found.model.id in chain:
                errors.append(f"{key}: {name!r} names {found.model.id!r} a second time")
            else:
                chain.append(found.model.id)
        out[model_id] = msgspec.structs.replace(
            models[model_id],
            fallbacks=tuple(chain),
            fallback_vision=tuple(models[f].vision for f in chain),
        )
    if errors:
        raise ConfigError(*errors, path=path)
    return out


def load_config(
    path: str | Path | None = None, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> Config:
    env = dict(os.environ) if env is None else env
    p = find_config(path, env, cwd)
    if p is None:
        raise ConfigError(
            f"no configuration: pass --config FILE, set {CONFIG_ENV}, or create ./{LOCAL_CONFIG} "
            f"(cursor-byok init) or {user_config_path(env)}"
        )
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration {p}: {exc.strerror}") from None
    return parse_config(text, env=env, path=str(p))
