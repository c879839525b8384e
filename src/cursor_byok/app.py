"""Composition root: build the store, the LLM adapters, the runner and observability, then
serve."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from .config import Config
from .launch import ListenError, check_bind, serve_async, url_of
from .llm.registry import LLMRegistry
from .observability.logs import install_redaction, secrets_of, setup_logging
from .observability.routes import Observability
from .store.errors import StoreError
from .store.sqlite import SQLiteStore
from .transport.runtime import Runner, RunnerServices

log = logging.getLogger("cursor_byok")


@dataclass
class App:
    config: Config
    store: SQLiteStore
    registry: LLMRegistry
    runner: Runner
    observability: Observability

    @classmethod
    async def open(cls, config: Config, database: str | None = None) -> App:
        store = await SQLiteStore.open(database or config.server.database)
        registry = LLMRegistry()
        obs = Observability(config, store)
        services = RunnerServices(
            models=config.models,
            store=store,
            llm_for=lambda m: registry.llm(m.provider),
            tool_timeout_s=config.server.tool_timeout_s,
            fsync_model_calls=config.server.fsync_model_calls,
            on_llm_call=obs.on_llm_call,
            on_run_end=obs.on_run_end,
            on_unknown_event=obs.metrics.observe_unknown_event,
        )
        runner = Runner(services)
        obs.metrics.bind_active_runs(lambda: runner.active_runs)
        obs.metrics.bind_caches(runner.cache_stats)
        return cls(config, store, registry, runner, obs)

    async def close(self) -> None:
        await self.registry.aclose()
        await self.observability.aclose()
        await self.store.close()


async def _serve(config: Config, host: str, port: int, database: str | None) -> int:
    try:
        app = await App.open(config, database)
    except StoreError as exc:
        log.error("cannot open the database: %s", exc)
        return 2
    scheme = "https" if config.server.certificate else "http"

    def listening() -> None:
        log.info("serving %d models on %s", len(config.models), url_of(scheme, host, port))

    try:
        await serve_async(
            config,
            app.runner.handle,
            host=host,
            port=port,
            routes=app.observability,
            on_server_created=install_redaction,
            on_listening=listening,
        )
    except ListenError as exc:
        log.error("%s", exc)
        return 2
    finally:
        await app.close()
    return 0


def serve(
    config: Config,
    *,
    host: str | None = None,
    port: int | None = None,
    database: str | None = None,
    log_level: str | None = None,
) -> int:
    host = host or config.server.host
    port = config.server.port if port is None else port
    level = (log_level or config.server.log_level).upper()
    setup_logging(config.server.log_format, level, secrets=secrets_of(config))
    try:
        check_bind(config, host)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    try:
        return asyncio.run(_serve(config, host, port, database))
    except KeyboardInterrupt:
        return 0


__all__ = ["App", "serve"]
