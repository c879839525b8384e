"""`server.unstarted_runs_per_client` across replicas and workers (issue 28 point 4's leftover):
the runs of one client waiting for their first message are counted in the database, so the
bound holds over every process on it, not per process (N processes let N times the bound
through before). A run whose RunSSE opens counts as it reads its stored appends (no extra wait
before the stream starts); an append to a new run counts the same runs. Two real server
processes on one real PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from tests.e2e.test_append_buffer import PER_CLIENT, serve
from tests.e2e.test_shim import Reader, ShimRun, http, run_request, unique
from tests.support import connect_client as cc
from tests.support.postgres import Cluster
from tests.support.upstream import FakeUpstream

TIMEOUT_S = 4  # server.unstarted_run_timeout_s: the waiting runs expire after it


@contextlib.asynccontextmanager
async def waiting(client: httpx.AsyncClient, count: int) -> AsyncIterator[list[Reader]]:
    """`count` RunSSE streams of new request ids, none sent a message."""
    async with contextlib.AsyncExitStack() as stack:
        readers = []
        for _ in range(count):
            sse = await stack.enter_async_context(cc.runsse(client, str(uuid.uuid4())))
            readers.append(Reader(sse, lambda _m: asyncio.sleep(0)))
        yield readers
        for reader in readers:
            await reader.close()


async def test_one_clients_waiting_runs_are_bounded_over_both_replicas(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    db = pg_cluster.create_database(f"waits_{uuid.uuid4().hex[:8]}")
    extra = f"unstarted_run_timeout_s = {TIMEOUT_S}\n"
    with (
        serve(upstream, db, tmp_path / "a", extra) as a,
        serve(upstream, db, tmp_path / "b", extra) as b,
    ):
        async with http(a) as on_a, http(b) as on_b:
            async with waiting(on_a, PER_CLIENT) as first:
                await asyncio.sleep(1.0)  # their counts are in (in the background)
                async with waiting(on_b, 3) as more:
                    await asyncio.sleep(1.5)
                    ends = [r.end for r in more]
                    # An append to a new run, on either replica: the same count refuses it.
                    refused = await cc.append(on_b, str(uuid.uuid4()), 0, cc.heartbeat())
                assert all(r.end is None for r in first), [r.end for r in first]
            # Once those expired (unstarted), the client may start runs again.
            await asyncio.sleep(TIMEOUT_S + 1.5)
            run = ShimRun(on_b)
            async with run.subscribe() as reader:
                await asyncio.sleep(0.5)
                await run.append(run_request(unique("room again")))
                end = await reader.wait_end(20)
    for e in ends:
        assert e is not None and e["error"]["code"] == "resource_exhausted", ends
        assert f"this client already has {PER_CLIENT} runs waiting" in e["error"]["message"]
    assert refused.status_code == 429, refused.text
    assert end == {} and reader.turn_ended, end
