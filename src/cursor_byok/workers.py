"""`server.workers = N`: N server processes on one port, each with its own event loop.

Why processes: one Python process runs its event loop on one core; a second core serves
runs only from a second interpreter. Each worker is a whole server (its store pool, its
runner, its lease: runtime/leases.py) exactly as a replica is, and the workers share the
port through SO_REUSEPORT (granian opens its socket with it), so the kernel spreads the
connections over them. Everything that must hold across workers already holds across
replicas through the database (docs/deploy.md, "Replicas"): a run's conversation is claimed
through the store, a `BidiAppend` landing on another worker than its `RunSSE` is relayed
through it. That relay (and the claims) exist on PostgreSQL only, and SQLite's one write lock
serves every worker's commits (two workers were slower at 2,000 runs started at once in one
measurement, faster in another: docs/benchmarks-server.md, "More than one core"), so
workers > 1 need a PostgreSQL database.

This process only supervises: it checks the port once (a plain bind finds another server),
starts the workers (`spawn`: a fresh interpreter, nothing inherited from a running loop),
passes SIGINT/SIGTERM on, and restarts a worker that dies after it served (its calls in
flight are finished by the lease rules). A worker that fails before it listens stops them all;
a worker whose supervisor is gone (even by SIGKILL) stops within a second.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.synchronize
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from types import FrameType

from .config import Config

log = logging.getLogger("cursor_byok")

MAX_WORKERS = 64
RESTART_DELAY_S = 1.0
STOP_TIMEOUT_S = 30.0

NEEDS_POSTGRES = (
    "server.workers = {n} needs a PostgreSQL database (server.database = "
    '"postgresql://..."): a BidiAppend reaching another worker than its RunSSE, and a newer '
    "run superseding a busy one on another worker, are relayed only through PostgreSQL, and "
    "on SQLite one write lock serves every worker; use server.workers = 1 with SQLite"
)


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What every worker is started with (pickled into the spawned interpreter)."""

    config: Config
    host: str
    port: int
    database: str | None
    log_level: str
    count: int


def worker_main(
    spec: WorkerSpec, index: int, ready: multiprocessing.synchronize.Event
) -> None:  # pragma: no cover - runs in the spawned worker (the e2e tests run it)
    """One worker: the whole server, without the port check the supervisor made."""
    import asyncio

    from .app import _serve
    from .observability.logs import secrets_of, setup_logging

    config = spec.config
    _stop_with_parent()
    setup_logging(
        config.server.log_format, spec.log_level, secrets=secrets_of(config, spec.database)
    )
    _prefix_log_records(f"worker {index}/{spec.count}: ")
    try:
        status = asyncio.run(
            _serve(
                config,
                spec.host,
                spec.port,
                spec.database,
                port_checked=True,
                on_ready=ready.set,
                worker=(index, spec.count),
            )
        )
    except KeyboardInterrupt:
        status = 0
    raise SystemExit(status)


def _stop_with_parent(every_s: float = 1.0) -> None:
    """End this worker (as at SIGTERM: its runs' records, its lease) once its supervisor is
    gone, even killed with SIGKILL: a worker must not serve on unsupervised."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


def _prefix_log_records(prefix: str) -> None:
    """Name the worker in every line it logs (a worker's lines share one stderr)."""
    previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if isinstance(record.msg, str):
            record.msg = prefix + record.msg
        return record

    logging.setLogRecordFactory(factory)


@dataclass
class _Worker:
    index: int
    process: BaseProcess
    ready: multiprocessing.synchronize.Event
    restarts: int = 0


@dataclass
class Supervisor:
    """Starts the workers, keeps them running, stops them together."""

    spec: WorkerSpec
    restart_delay_s: float = RESTART_DELAY_S
    _workers: list[_Worker] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")

    def _start(self, index: int, restarts: int = 0) -> _Worker:
        ready = self._context.Event()
        process = self._context.Process(
            target=worker_main,
            args=(self.spec, index, ready),
            name=f"cursor-byok-worker-{index}",
            daemon=False,
        )
        process.start()
        return _Worker(index, process, ready, restarts)

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        """Serve until a signal (or `stop`); the exit status of `cursor-byok serve`."""
        handlers = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            return self._run()
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop.set()

    def _run(self) -> int:
        n = self.spec.count
        self._workers = [self._start(i + 1) for i in range(n)]
        status = 0
        while not self._stop.wait(0.1):
            for slot, worker in enumerate(self._workers):
                code = worker.process.exitcode
                if code is None:
                    continue
                if not worker.ready.is_set():  # it never listened: a start-up failure
                    log.error("worker %d/%d exited at start (status %s)", worker.index, n, code)
                    status = code or 2
                    self._stop.set()
                    break
                log.error(
                    "worker %d/%d exited (status %s); starting it again", worker.index, n, code
                )
                time.sleep(self.restart_delay_s)
                self._workers[slot] = self._start(worker.index, worker.restarts + 1)
        self._terminate()
        return status

    def _terminate(self) -> None:
        for worker in self._workers:
            if worker.process.exitcode is None and worker.process.pid is not None:
                _signal(worker.process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.exitcode is None:
                log.warning(
                    "worker %d did not stop in %.0f s; killing it", worker.index, STOP_TIMEOUT_S
                )
                worker.process.kill()
                worker.process.join(5)

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers if w.process.pid is not None]


def _signal(process: BaseProcess, sig: signal.Signals) -> None:
    if process.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)


__all__ = ["MAX_WORKERS", "NEEDS_POSTGRES", "Supervisor", "WorkerSpec", "worker_main"]
