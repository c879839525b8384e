"""`server.workers = N`: N processes serving one port (src/cursor_byok/workers.py).

Real `cursor-byok serve` processes on a real PostgreSQL database; the kernel spreads the
connections over the workers (SO_REUSEPORT), and a keep-alive HTTP/1.1 connection stays on the
worker that accepted it, so a client of one connection is bound to one worker, which its
`/metrics` names (`cursor_byok_worker`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx

from cursor_byok.launch import free_port
from tests.e2e import test_crash_recovery as crash
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    exec_of,
    is_text,
    read_ok,
    run_request,
    unique,
)
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.postgres import Cluster
from tests.support.upstream import FakeUpstream

_WORKER = re.compile(r'cursor_byok_worker\{count="(\d+)",index="(\d+)",pid="(\d+)"\} 1\.0')


async def worker_of(client: httpx.AsyncClient) -> tuple[int, int]:
    """(index, pid) of the worker this client's one connection reached."""
    r = await client.get("/metrics")
    assert r.status_code == 200, r.text
    found = _WORKER.search(r.text)
    assert found, r.text[:2000]
    return int(found.group(2)), int(found.group(3))


@contextlib.asynccontextmanager
async def bound_clients(
    server: ServerProcess, count: int
) -> AsyncIterator[list[httpx.AsyncClient]]:
    """One single-connection client per worker index 1..count (new connections until the kernel
    has handed one to each worker)."""
    found: dict[int, httpx.AsyncClient] = {}
    spare: list[httpx.AsyncClient] = []
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    try:
        for _ in range(200):
            client = httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits)
            index, _pid = await worker_of(client)
            if index in found:
                spare.append(client)
            else:
                found[index] = client
            if len(found) == count:
                break
        assert sorted(found) == list(range(1, count + 1)), sorted(found)
        yield [found[i] for i in range(1, count + 1)]
    finally:
        for client in [*found.values(), *spare]:
            await client.aclose()


class SplitRun(ShimRun):
    """A shim run whose RunSSE is on one worker's connection and whose every append (the run
    request, tool results, the reader's answers to the server's blob requests) goes to the
    other's."""

    def __init__(self, sse: httpx.AsyncClient, appends: httpx.AsyncClient) -> None:
        super().__init__(appends)
        self.sse = sse

    @contextlib.asynccontextmanager
    async def subscribe(self, **kw: Any) -> AsyncIterator[Reader]:
        async with cc.runsse(self.sse, self.request_id, token=self.token, **kw) as stream:
            assert stream.response.status_code == 200
            reader = Reader(
                stream, self.send, blobs=self.blobs, get_blob=self.get_blob, answered=self.answered
            )
            try:
                yield reader
            finally:
                await reader.close()


def workers_config(upstream: FakeUpstream, db: str, n: int = 2) -> str:
    return brain_config(upstream.base_url, db=db, extra=f"workers = {n}")


async def test_two_workers_serve_one_port_and_a_runs_appends_reach_its_runsse_on_the_other(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    """RunSSE on worker 1, every BidiAppend of the run (the run request, a tool result) on
    worker 2: the append is relayed through the database to the RunSSE's worker; one turn, one
    tool result, one answer. Both workers listen on the port `serve` was given."""
    db = pg_cluster.create_database(f"workers_{uuid.uuid4().hex[:8]}")
    prompt = unique('[tool Read {"path": "/home/tester/project-e2e/notes.md"}]')
    conversation = str(uuid.uuid4())
    with server_process(workers_config(upstream, db), tmp_path) as server:
        async with bound_clients(server, 2) as (one, two):
            pids = {(await worker_of(one))[1], (await worker_of(two))[1]}
            assert len(pids) == 2 and server.proc.pid not in pids
            run = SplitRun(one, two)
            async with run.subscribe() as reader:
                await run.append(run_request(prompt, conversation))
                ask = await reader.wait_for(exec_of("read_args"), 20)
                esm = ask.exec_server_message
                result = read_ok(esm.id, esm.read_args.path, "line one\nline two\n")
                await run.append(result)
                try:
                    end = await reader.wait_end(20)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}\n{server.log()}") from None
        log = server.log()
    assert end == {} and reader.turn_ended, log
    assert "line one" in "".join(reader.texts)
    assert "worker 1/2: " in log and "worker 2/2: " in log
    calls = crash.db_calls(db, conversation)
    assert [status for _, _, status in calls] == ["committed", "committed"], calls


async def test_a_restarted_worker_never_takes_a_live_siblings_call(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    """Worker 1 waits on a model call; worker 2 is killed (kill -9) and the supervisor starts
    it again. At its start the new worker finishes the calls of processes that are gone
    (runtime/leases.py): worker 1 is alive, so its call stays its own and ends committed with
    the answer, not canceled as abandoned."""
    db = pg_cluster.create_database(f"workers_{uuid.uuid4().hex[:8]}")
    prompt = unique("[slow 12] a slow answer")
    conversation = str(uuid.uuid4())
    with server_process(workers_config(upstream, db), tmp_path) as server:
        async with bound_clients(server, 2) as (one, two):
            _, killed = await worker_of(two)
            run = SplitRun(one, two)  # `one` carries the RunSSE: every append goes to two
            async with run.subscribe() as reader:
                await run.append(run_request(prompt, conversation))
                await _until(lambda: _in_flight(db, conversation), server)
                os.kill(killed, signal.SIGKILL)
                restarted = await _new_worker(server, killed)
                # The new worker has taken its lease and looked for dead owners' calls by now.
                assert _in_flight(db, conversation), crash.db_calls(db, conversation)
                end = await reader.wait_end(40)
                texts = "".join(t for t in reader.texts)
        log = server.log()
    assert restarted != killed
    assert "worker 2/2 exited" in log, log
    assert end == {} and reader.turn_ended, log
    assert texts == f"You said: {prompt}"
    calls = crash.db_calls(db, conversation)
    assert [status for _, _, status in calls] == ["committed"], (calls, log)


def _in_flight(db: str, conversation: str) -> bool:
    """The conversation's one model call is in flight (planned or streaming)."""
    return [s in ("planned", "streaming") for _, _, s in crash.db_calls(db, conversation)] == [True]


async def _until(cond: Callable[[], bool], server: ServerProcess, timeout: float = 20.0) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, server.log()
        await asyncio.sleep(0.05)


async def _new_worker(server: ServerProcess, old_pid: int, timeout: float = 40.0) -> int:
    """The pid of worker 2 once a process other than `old_pid` answers as it, and its lease is
    in place (it listens only after `Runner.start`)."""
    import asyncio

    deadline = time.monotonic() + timeout
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    while time.monotonic() < deadline:
        async with httpx.AsyncClient(base_url=server.url, timeout=10, limits=limits) as client:
            with contextlib.suppress(httpx.HTTPError):
                index, pid = await worker_of(client)
                if index == 2 and pid != old_pid:
                    return pid
        await asyncio.sleep(0.05)
    raise AssertionError(f"worker 2 not started again:\n{server.log()}")


def test_workers_on_sqlite_are_refused_and_serve_says_why(tmp_path: Path) -> None:
    config = tmp_path / "cursor-byok.toml"
    config.write_text(brain_config("http://127.0.0.1:9", db=tmp_path / "x.db", extra="workers = 2"))
    serve = [sys.executable, "-m", "cursor_byok", "serve", "--config", str(config)]
    done = subprocess.run(
        [*serve, "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "server.workers = 2 needs a PostgreSQL database" in done.stderr
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened


def test_workers_out_of_range_is_a_configuration_error(tmp_path: Path) -> None:
    from cursor_byok.config import ConfigError, parse_config

    for bad in (0, 65):
        try:
            parse_config(brain_config("http://127.0.0.1:9", db="x.db", extra=f"workers = {bad}"))
        except ConfigError as exc:
            assert "server.workers must be 1-64" in str(exc)
        else:
            raise AssertionError(f"workers = {bad} accepted")


__all__ = ["is_text"]


async def test_the_workers_stop_when_their_supervisor_is_killed(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    """kill -9 of `serve` (the supervisor): its workers do not serve on unsupervised."""
    db = pg_cluster.create_database(f"workers_{uuid.uuid4().hex[:8]}")
    with server_process(workers_config(upstream, db), tmp_path) as server:
        async with bound_clients(server, 2) as (one, two):
            pids = [(await worker_of(one))[1], (await worker_of(two))[1]]
        server.kill9()
        deadline = time.monotonic() + 20
        while any(_alive(p) for p in pids):
            assert time.monotonic() < deadline, f"workers still running:\n{server.log()}"
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has stopped
