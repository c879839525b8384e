"""Composition root: build the store, the LLM adapters, the runner and observability, then
serve."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import heap
from .access_tokens import TokenDirectory
from .config import Config
from .database_size import database_size_of
from .launch import (
    ListenError,
    bind_address,
    check_bind,
    free_port,
    refuse_if_taken,
    serve_async,
    url_of,
)
from .llm.registry import LLMRegistry
from .observability.logs import install_redaction, secrets_of, setup_logging
from .observability.routes import Observability
from .rpc_backend import RpcAnswers
from .sign_in import PATH_KEY, Credentials, SessionDirectory, SignInFlow
from .sign_in_page import SignInRoutes
from .start_check import database_fit_to_serve, moved_database
from .start_warnings import warn_at_start
from .store.backends import AnyStore, is_postgres_url, open_store
from .store.errors import StoreError
from .transport.runtime import Runner, RunnerServices, new_runner
from .web.addresses import allowed_by
from .web.convert import ConvertLimits, PageConverter
from .web.fetch import FetchLimits, PageFetcher
from .web.images import ImageMaker
from .web.jobs import job_runner
from .web.prices import JobPrices
from .web.search import WebSearch
from .web.types import JobRunner
from .workers import NEEDS_POSTGRES, Supervisor, WorkerSpec

log = logging.getLogger("cursor_byok")


@dataclass
class App:
    config: Config
    store: AnyStore
    registry: LLMRegistry
    runner: Runner
    observability: Observability
    tokens: TokenDirectory
    sessions: SessionDirectory
    credentials: Credentials
    sign_in: SignInRoutes
    rpc_answers: RpcAnswers
    path_key: str
    converter: PageConverter  # WebFetch's worker processes (none run until the first page)

    @classmethod
    async def open(cls, config: Config, database: str | None = None) -> App:
        store = await open_store(database or config.server.database)
        if config.server.database_max_mib:
            await store.set_size_limit(config.server.database_max_mib << 20)
        registry = LLMRegistry()
        converter = page_converter(config)
        obs = Observability(config, store)
        services = RunnerServices(
            models=config.models,
            default_model=config.server.default_model,
            store=store,
            llm_for=lambda m: registry.llm(m.provider),
            tool_timeout_s=config.server.tool_timeout_s,
            question_timeout_s=config.server.question_timeout_s,
            fsync_model_calls=config.server.fsync_model_calls,
            disabled_tools=tuple(config.server.disabled_tools),
            enabled_tools=tuple(config.server.enabled_tools),
            web_search_configured=config.web_search.offered,
            image_generation=config.image_generation is not None,
            subagent_max_depth=config.server.subagent_max_depth,
            run_job=server_jobs(config, registry, converter),
            job_prices=job_prices(config),
            page_text_chars=config.web_fetch.max_text_chars,
            on_llm_call=obs.on_llm_call,
            on_run_end=obs.on_run_end,
            outcome_row=obs.outcome_row,
            on_fallback=obs.on_fallback,
            on_compaction=obs.on_compaction,
            on_unknown_event=obs.metrics.observe_unknown_event,
        )
        services.claims = store.replicas
        runner = new_runner(services)
        await runner.start()  # its lease; it ends the calls of processes that died
        if store.replicas is not None:
            await store.replicas.watch_claims(runner.on_claim)
        obs.metrics.bind_active_runs(lambda: runner.active_runs)
        obs.metrics.bind_caches(runner.cache_stats)
        obs.metrics.bind_database_size(database_size_of(store), config.server.database_max_mib)
        tokens = TokenDirectory(store, linger_s=linger_s(config))
        await tokens.load()
        obs.bind_token_names(tokens.name_of)
        sessions = SessionDirectory(store, ttl_s=config.server.access_token_ttl_s)
        await sessions.load()
        # The key the CLI derives repository path names from (GetServerConfig): random, made
        # once per database, so every replica and restart hands out the same one.
        fresh = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
        path_key = await store.server_secret(PATH_KEY, fresh, int(time.time() * 1000))
        return cls(
            config,
            store,
            registry,
            runner,
            obs,
            tokens,
            sessions,
            Credentials(tokens, sessions),
            SignInRoutes(SignInFlow(store, tokens, sessions)),
            RpcAnswers(
                config,
                store,
                registry,
                tokens,
                on_llm_call=obs.on_llm_call,
                limits=runner.token_limits,
                process_id=runner.replica,
            ),
            path_key,
            converter,
        )

    async def close(self) -> None:
        await self.runner.close()  # the runs' last records, then the lease ends
        await self.converter.aclose()
        await self.sessions.close()
        await self.tokens.close()
        await self.registry.aclose()
        await self.observability.aclose()
        await self.store.close()


def linger_s(config: Config) -> float:
    """How long a revoked token's appends still reach the runs it started: as long as such a
    run can wait on a tool or a person, and 5 minutes for the model call before it."""
    server = config.server
    return max(server.tool_timeout_s, server.question_timeout_s) + 300.0


def page_converter(config: Config) -> PageConverter:
    """WebFetch's HTML-to-text worker pool ([web_fetch] convert_*), started at the first page."""
    web = config.web_fetch
    return PageConverter(
        ConvertLimits(
            max_bytes=web.convert_max_bytes,
            timeout_s=web.convert_timeout_s,
            workers=web.convert_workers,
            memory_mb=web.convert_memory_mb,
        )
    )


def job_prices(config: Config) -> JobPrices:
    """What the server's jobs cost: [image_generation] price_per_image, each search backend's
    price_per_search (web/prices.py)."""
    image = config.image_generation
    return JobPrices(
        image_provider=image.provider if image is not None else "",
        image_model=image.model if image is not None else "",
        price_per_image=image.price_per_image if image is not None else None,
        search=config.web_search,
    )


def server_jobs(config: Config, registry: LLMRegistry, converter: PageConverter) -> JobRunner:
    """The runner of the server's own work for tool calls (web/jobs.py); a provider's own
    web search runs over `registry`'s adapters, pages become text in `converter`'s workers."""
    web = config.web_fetch
    fetcher = PageFetcher(
        enabled=web.server_side,
        limits=FetchLimits(
            max_bytes=web.max_bytes, timeout_s=web.timeout_s, max_redirects=web.max_redirects
        ),
        allowed=allowed_by(web.allowed_networks),
        converter=converter,
    )
    images = None
    if (image := config.image_generation) is not None:
        images = ImageMaker(
            config.providers[image.provider],
            model=image.model,
            timeout_s=image.timeout_s,
            extra_body=image.extra_body,
        )
    search = WebSearch(config.web_search, registry=registry) if config.web_search.offered else None
    return job_runner(fetcher=fetcher, images=images, search=search, converter=converter)


async def _serve(
    config: Config,
    host: str,
    port: int,
    database: str | None,
    *,
    port_checked: bool = False,
    on_ready: Callable[[], None] | None = None,
    worker: tuple[int, int] | None = None,
) -> int:
    """One server process; a worker of several (workers.py) names itself `worker` (index,
    count), skips the port check its supervisor made and says `on_ready` once it listens."""
    if database is None and (moved := moved_database(config)) is not None:
        log.error("%s", moved)
        return 2
    try:
        path = database or config.server.database
        # A PostgreSQL server checks its own pages; the quick check reads a SQLite file.
        if not is_postgres_url(path) and not await database_fit_to_serve(
            path, config.server.start_check_s
        ):
            return 2
        app = await App.open(config, database)
    except StoreError as exc:
        log.error("cannot open the database: %s", exc)
        return 2
    if worker is not None:
        app.observability.metrics.bind_worker(*worker, os.getpid())
    scheme = "https" if config.server.certificate else "http"
    loop = asyncio.get_running_loop()
    checks: list[asyncio.Task[None]] = []
    started = time.monotonic()

    def listening() -> None:
        loop.call_soon_threadsafe(heap.settle)  # start-up is over: freeze what it made
        log.info("serving %d models on %s", len(config.models), url_of(scheme, host, port))
        if on_ready is not None:
            on_ready()
        if worker is None or worker[0] == 1:  # the start warnings once, not once a worker
            loop.call_soon_threadsafe(
                lambda: checks.append(loop.create_task(warn_at_start(config)))
            )

    try:
        await serve_async(
            config,
            app.runner.handle,
            host=host,
            port=port,
            routes=app.observability,
            authenticator=app.credentials,
            plain_routes=app.sign_in,
            rpc_backend=app.rpc_answers,
            path_encryption_key=app.path_key,
            on_server_created=install_redaction,
            on_listening=listening,
            relay=app.store.replicas,
            check_port=not port_checked,
        )
    except ListenError as exc:
        log.error("%s", exc)
        return 2
    finally:
        for task in checks:
            task.cancel()
        await app.close()
    log.info("stopped (uptime %s)", _uptime(time.monotonic() - started))
    return 0


def _uptime(seconds: float) -> str:
    """`3 s`, `4 min 05 s`, `2 h 03 min`, `3 d 04 h`: for the line at shutdown."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600:02d} h"


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
    setup_logging(config.server.log_format, level, secrets=secrets_of(config, database))
    try:
        check_bind(config, host)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    workers = config.server.workers
    if workers > 1:
        return _serve_workers(config, host, port, database, level, workers)
    try:
        return asyncio.run(_serve(config, host, port, database))
    except KeyboardInterrupt:
        return 0


def _serve_workers(
    config: Config, host: str, port: int, database: str | None, level: str, workers: int
) -> int:
    """server.workers > 1: N processes on one port (workers.py); PostgreSQL only."""
    if not is_postgres_url(database or config.server.database):
        log.error("%s", NEEDS_POSTGRES.format(n=workers))
        return 2
    try:
        refuse_if_taken(host, port)
    except ListenError as exc:
        log.error("%s", exc)
        return 2
    if port == 0:  # every worker must listen on the same port: pick it here
        port = free_port(bind_address(host, 0))
    log.info("starting %d workers on port %d", workers, port)
    spec = WorkerSpec(config, host, port, database, level, workers)
    return Supervisor(spec).run()


__all__ = ["App", "serve"]
