"""Pages to text in worker processes, never on the server's event loop.

HTML parsing is super-linear in nesting (an HTML5 tree builder walks the stack of open
elements for many start tags): 320 kB of nested `<ul><li>` took 39 s on this machine, and on
the event loop that froze every run. So every conversion runs in a worker process
(web/convert_worker.py), and each is bounded three ways: its input (`max_bytes`, refused
before anything is sent), its time (`timeout_s`: the worker is killed at the deadline and a
fresh one started for the next page), and its memory (`memory_mb`, the worker's address
space). A thread would not do: lexbor's parse releases the GIL, but the Python walk over the
tree holds it, and a thread cannot be stopped at a deadline (docs/operations.md, "HTML to
text").

The pool starts nothing until the first page, keeps at most `workers` processes, hands each
one page at a time, and lets at most `max_waiting` pages wait for a worker (more: a "busy"
error at once). A worker that died (killed from outside, out of memory) is found when it is
next used and replaced; `aclose()` ends them all. Every failure is a `ConvertFailed` whose
message the model reads: the limit that was hit and what to try instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
from dataclasses import dataclass

import msgspec

from .convert_worker import NICENESS, ConvertReply, ConvertRequest

__all__ = ["ConvertFailed", "ConvertLimits", "PageConverter"]

log = logging.getLogger("cursor_byok.web")

_START_TIMEOUT_S = 60.0  # a worker's start (interpreter and imports) on a loaded machine
_CLOSE_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class ConvertLimits:
    max_bytes: int = 4_000_000  # the largest page converted ([web_fetch] convert_max_bytes)
    timeout_s: float = 5.0  # one conversion, in its worker ([web_fetch] convert_timeout_s)
    workers: int = 2  # processes at most ([web_fetch] convert_workers)
    memory_mb: int = 1024  # each worker's address space ([web_fetch] convert_memory_mb)
    max_waiting: int = 32  # pages waiting for a worker; more are refused at once


class ConvertFailed(msgspec.Struct, frozen=True):
    """The page was not converted; `message` says why, for the model."""

    message: str


class _Worker:
    """One worker process and the loop's ends of its pipes."""

    __slots__ = ("process", "reader", "writer")

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.process = process
        self.reader = reader
        self.writer = writer

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    async def send(self, payload: bytes) -> None:
        self.writer.write(len(payload).to_bytes(4, "big") + payload)
        await self.writer.drain()

    async def receive(self) -> bytes:
        head = await self.reader.readexactly(4)
        return await self.reader.readexactly(int.from_bytes(head, "big"))

    async def kill(self) -> None:
        """Kill and reap it (waitpid in a thread: the loop never waits on a process)."""
        self.writer.close()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await asyncio.to_thread(self.process.wait)

    async def end(self, wait_s: float) -> None:
        """Close its input, so it ends by itself; killed if it has not within `wait_s`."""
        self.writer.close()
        try:
            await asyncio.wait_for(asyncio.to_thread(self.process.wait, wait_s), wait_s + 1)
        except (subprocess.TimeoutExpired, TimeoutError):
            await self.kill()


class PageConverter:
    """The pool. Use one per server; `aclose()` at shutdown."""

    def __init__(self, limits: ConvertLimits = ConvertLimits()) -> None:
        self.limits = limits
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._slots = asyncio.Semaphore(limits.workers)
        self._waiting = 0
        self._closed = False
        self.started = 0  # worker processes started, for tests and logs
        self.killed = 0  # conversions stopped at their deadline
        self.crashed = 0  # workers found dead

    @property
    def workers(self) -> int:
        """Worker processes alive now."""
        return sum(1 for w in (*self._idle, *self._busy) if w.alive)

    def pids(self) -> list[int]:
        return [w.process.pid for w in (*self._idle, *self._busy) if w.alive]

    async def html_text(self, html: str, content_type: str) -> str | ConvertFailed:
        """A page the client fetched (already text) as the model reads it."""
        if len(html) > self.limits.max_bytes:  # a character is a byte at least
            return self._too_big(len(html), "characters")
        body = html.encode("utf-8", errors="replace")
        return await self._convert(ConvertRequest(body=body, content_type=content_type, utf8=True))

    async def body_text(self, body: bytes, content_type: str) -> str | ConvertFailed:
        """A body the server fetched (bytes in the page's charset) as the model reads it."""
        return await self._convert(ConvertRequest(body=body, content_type=content_type))

    async def aclose(self) -> None:
        """End every worker: idle ones when they read the end of their input, busy ones (and
        any that do not end in time) killed."""
        self._closed = True
        idle, self._idle = self._idle, []
        busy, self._busy = list(self._busy), set()
        await asyncio.gather(*(w.end(_CLOSE_WAIT_S) for w in idle), *(w.kill() for w in busy))

    # -- the pool ------------------------------------------------------------------------------

    async def _convert(self, request: ConvertRequest) -> str | ConvertFailed:
        if self._closed:
            return ConvertFailed(message="the server is shutting down; the page was not read")
        if len(request.body) > self.limits.max_bytes:
            return self._too_big(len(request.body), "bytes")
        if self._waiting >= self.limits.max_waiting:
            return ConvertFailed(
                message=f"the server is converting {self.limits.workers} other pages and "
                f"{self._waiting} more wait; try again in a moment"
            )
        payload = msgspec.msgpack.encode(request)
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        try:
            return await self._run(payload, len(request.body))
        finally:
            self._slots.release()

    async def _run(self, payload: bytes, size: int) -> str | ConvertFailed:
        for attempt in (1, 2):
            worker = await self._worker()
            if isinstance(worker, ConvertFailed):
                return worker
            self._busy.add(worker)
            try:
                await worker.send(payload)
            except (BrokenPipeError, ConnectionResetError):
                # It died while idle (killed from outside): the page is not to blame.
                self._busy.discard(worker)
                await self._found_dead(worker)
                if attempt == 2:
                    return ConvertFailed(message="the page converter could not be started")
                continue
            except BaseException:
                self._busy.discard(worker)  # cancelled mid-frame: it cannot be used again
                await asyncio.shield(worker.kill())
                raise
            try:
                async with asyncio.timeout(self.limits.timeout_s):
                    reply = msgspec.msgpack.decode(await worker.receive(), type=ConvertReply)
            except TimeoutError:
                self._busy.discard(worker)
                self.killed += 1
                await worker.kill()
                log.warning(
                    "a page of %d bytes took longer than %g s to convert to text: its worker "
                    "was killed",
                    size,
                    self.limits.timeout_s,
                )
                return self._too_slow()
            except (asyncio.IncompleteReadError, ConnectionResetError, msgspec.DecodeError):
                self._busy.discard(worker)
                code = await self._found_dead(worker)
                return self._died(code)
            except BaseException:
                self._busy.discard(worker)  # cancelled mid-conversion: its answer is unusable
                await asyncio.shield(worker.kill())
                raise
            self._busy.discard(worker)
            if self._closed:
                await worker.kill()
            else:
                self._idle.append(worker)
            if reply.error == "memory":
                return self._out_of_memory()
            if reply.error:
                log.error("the page converter failed: %s", reply.error)
                return ConvertFailed(message="the server failed to convert the page to text")
            return reply.text
        raise AssertionError("unreachable")  # pragma: no cover

    async def _worker(self) -> _Worker | ConvertFailed:
        while self._idle:
            worker = self._idle.pop()
            if worker.alive:
                return worker
            await self._found_dead(worker)
        try:
            return await self._start()
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.error("could not start a page converter process: %r", exc)
            return ConvertFailed(message="the server could not start its page converter")

    async def _start(self) -> _Worker:
        # Popen waits until the child has exec'd, which on a loaded machine took up to 0.6 s
        # (asyncio's own subprocess starts it on the loop): a thread waits instead.
        argv = [sys.executable, "-m", "cursor_byok.web.convert_worker", str(self.limits.memory_mb)]
        process = await asyncio.to_thread(_spawn, argv)
        try:
            worker = await _connected(process)
        except BaseException:
            process.kill()
            await asyncio.to_thread(process.wait)
            raise
        try:
            async with asyncio.timeout(_START_TIMEOUT_S):
                ready = await worker.receive()
        except BaseException:
            await worker.kill()
            raise
        if ready != b"":
            await worker.kill()
            raise OSError("the page converter did not start")
        self.started += 1
        return worker

    async def _found_dead(self, worker: _Worker) -> int | None:
        await worker.kill()  # reaps it
        self.crashed += 1
        code = worker.process.returncode
        log.warning("a page converter process ended (exit code %s); it is replaced", code)
        return code

    def _too_big(self, size: int, unit: str) -> ConvertFailed:
        return ConvertFailed(
            message=f"the page is too large to convert to text: {size:,} {unit}, and the "
            f"server converts at most {self.limits.max_bytes:,} bytes ([web_fetch] "
            "convert_max_bytes). Try a more specific URL (one section or one page of it), a "
            "plain-text or raw version, or an API that answers with JSON."
        )

    def _too_slow(self) -> ConvertFailed:
        return ConvertFailed(
            message=f"converting the page to text took longer than {self.limits.timeout_s:g} s "
            "([web_fetch] convert_timeout_s) and was stopped: its HTML is likely nested very "
            "deeply. Try a plain-text or raw version of the page, a more specific URL, or an "
            "API that answers with JSON."
        )

    def _out_of_memory(self) -> ConvertFailed:
        return ConvertFailed(
            message=f"converting the page to text needed more than {self.limits.memory_mb} MB "
            "([web_fetch] convert_memory_mb) and was stopped. Try a smaller or plain-text "
            "version of the page."
        )

    def _died(self, code: int | None) -> ConvertFailed:
        return ConvertFailed(
            message=f"the page converter stopped while reading this page (exit code {code}); "
            f"the page may need more than {self.limits.memory_mb} MB. Try a smaller or "
            "plain-text version of the page."
        )


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    """Start a worker and put it below every ordinary task at once, so even its start (an
    interpreter and its imports, ~0.2 s of CPU) yields to the server."""
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_worker_environment()
    )
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(process.pid, os.SCHED_IDLE, os.sched_param(0))
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, process.pid, NICENESS)
    return process


async def _connected(process: subprocess.Popen[bytes]) -> _Worker:
    """The process's pipes as the loop's stream reader and writer."""
    assert process.stdin is not None and process.stdout is not None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**16)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), process.stdout)
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), process.stdin
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return _Worker(process, reader, writer)


def _worker_environment() -> dict[str, str]:
    """What a worker needs to import this package, and nothing else from the server's
    environment (no provider keys)."""
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for name in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "PYTHONHOME"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env
