"""The replicas' append buffer on PostgreSQL (issue 27, point 4): `run_appends` is a delivery
buffer, not history. A flood of appends to request ids that never start is bounded per client,
one request id's rows are bounded, a run's rows are deleted once it ended, and a database at
its size cap (`server.database_max_mib`, polled) refuses new runs with `unavailable` "storage
full", with a gauge and a doctor row. A real server process on a real PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import psycopg
import pytest

from cursor_byok.doctor import run_checks
from cursor_byok.store.appends import UNSTARTED_ROWS_KEPT_MS
from cursor_byok.store.postgres import PostgresStore
from tests.e2e.test_shim import ShimRun, http, run_request, unique
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.postgres import Cluster
from tests.support.upstream import FakeUpstream

KIB = 1024
PER_CLIENT = 8


def table(db: str) -> tuple[int, int]:
    """(rows, bytes of payload) of run_appends."""
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(octet_length(payload)), 0) FROM run_appends"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def rows_of(db: str, request_id: str) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM run_appends WHERE request_id = %s", (request_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def padded(kib: int) -> bytes:
    """A client message of about `kib` KiB (a run request with that much text)."""
    return cc.run_request("x" * (kib * KIB)).SerializeToString()


def serve(upstream: FakeUpstream, db: str, work: Path, extra: str = "") -> ServerProcess:
    work.mkdir(exist_ok=True)
    limits = f"unstarted_runs_per_client = {PER_CLIENT}\nunstarted_mib_per_client = 1\n"
    return server_process(brain_config(upstream.base_url, db=db, extra=limits + extra), work)


async def test_a_flood_of_appends_to_runs_that_never_start_is_bounded(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    """The issue's probe, scaled: 200 appends of 64 KiB to new request ids from one client.
    Before, every one was stored (2,000 of them: 131 MB); now the client's runs waiting for
    their first message are bounded (8 here), and so are their bytes (1 MiB here)."""
    db = pg_cluster.create_database(f"flood_{uuid.uuid4().hex[:8]}")
    with serve(upstream, db, tmp_path / "a") as server:
        async with http(server) as client:
            statuses = []
            for _ in range(200):
                r = await cc.append(client, str(uuid.uuid4()), 0, padded(64))
                statuses.append(r.status_code)
            assert statuses == [200] * PER_CLIENT + [429] * (200 - PER_CLIENT), statuses
            assert "this client already has 8 runs waiting" in r.json()["message"]
            rows, held = table(db)
            assert rows == PER_CLIENT and held < PER_CLIENT * 65 * KIB, (rows, held)
            # Bytes: more appends to one of those runs pass the client's 1 MiB.
            waiting = str(uuid.uuid4())
            codes = []
            for n in range(1, 20):
                r = await cc.append(client, waiting, n, padded(64))
                codes.append(r.status_code)
        assert codes == [429] * 19  # a 9th waiting run: refused by count first
        assert table(db)[0] == PER_CLIENT


async def test_bytes_per_client_and_rows_per_run_are_bounded(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    db = pg_cluster.create_database(f"bound_{uuid.uuid4().hex[:8]}")
    extra = "run_output_mib = 2\ntrusted_proxies = ['127.0.0.1/32']\n"
    with serve(upstream, db, tmp_path / "a", extra) as server:
        async with http(server) as client:
            # One waiting run of client 10.5.0.1 fills its 1 MiB: the next append is refused.
            mallory = {"x-forwarded-for": "10.5.0.1"}
            waiting = str(uuid.uuid4())
            codes = []
            for n in range(1, 14):
                r = await cc.append(client, waiting, n, padded(100), headers=mallory)
                codes.append(r.status_code)
            accepted = codes.count(200)
            assert codes == [200] * accepted + [429] * (13 - accepted) and accepted >= 9, codes
            assert (
                "runs of this client that have not started would hold more than 1 MiB"
                in (r.json()["message"])
            )
            # Another client behind the same proxy is not refused.
            other = {"x-forwarded-for": "10.5.0.2"}
            ok = await cc.append(client, str(uuid.uuid4()), 1, cc.heartbeat(), headers=other)
            assert ok.status_code == 200, ok.text
            # A run that started: its rows are bounded by what one run may hold (2 MiB here).
            run = ShimRun(client)
            async with run.subscribe() as reader:
                await run.append(run_request(unique('[tool Read {"path": "/x"}]')))
                await reader.wait_for(lambda m: m.HasField("exec_server_message"), 20)
                codes = []
                for n in range(24):
                    r = await cc.append(client, run.request_id, 1000 + n, padded(100))
                    codes.append(r.status_code)
            accepted = codes.count(200)
            assert codes == [200] * accepted + [429] * (24 - accepted) and accepted >= 19, codes
            assert "the messages stored for this run would pass" in r.json()["message"]
        with psycopg.connect(db) as conn:
            row = conn.execute(
                "SELECT SUM(bytes) FROM run_appends WHERE request_id = %s", (run.request_id,)
            ).fetchone()
        assert row is not None and row[0] <= 2 << 20


async def test_a_runs_rows_are_deleted_once_it_ended_and_stale_ones_are_swept(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    db = pg_cluster.create_database(f"ended_{uuid.uuid4().hex[:8]}")
    with serve(upstream, db, tmp_path / "a") as server:
        async with http(server) as client:
            run = ShimRun(client)
            async with run.subscribe() as reader:
                await run.append(run_request(unique("deleted after")))
                end = await reader.wait_end(20)
            assert end == {} and reader.turn_ended
            for _ in range(100):  # deleted in the background, right after the run's end
                if rows_of(db, run.request_id) == 0:
                    break
                await asyncio.sleep(0.05)
            assert rows_of(db, run.request_id) == 0
            waiting = str(uuid.uuid4())
            r = await cc.append(client, waiting, 1, cc.heartbeat())  # never starts
            assert r.status_code == 200
    assert rows_of(db, waiting) == 1
    # The sweep, later: rows of a run that never started, once older than they are kept.
    later = [0]
    store = await PostgresStore.open(db, clock=lambda: later[0])
    try:
        later[0] = 10**13
        assert await store.sweep_appends() == 1
    finally:
        await store.close()
    assert rows_of(db, waiting) == 0 and UNSTARTED_ROWS_KEPT_MS < 10**13


def database_mib(db: str) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert row is not None
    return int(row[0]) >> 20


async def test_a_database_at_its_size_cap_refuses_new_runs_storage_full(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    db = pg_cluster.create_database(f"cap_{uuid.uuid4().hex[:8]}")
    async with await PostgresStore.open(db):  # migrated: the size the server will see
        pass
    cap = database_mib(db)  # at (or just under) the cap already: the first poll says full
    config = brain_config(upstream.base_url, db=db, extra=f"database_max_mib = {cap}\n")
    work = tmp_path / "a"
    work.mkdir()
    with server_process(config, work) as server:
        async with http(server) as client:
            run = ShimRun(client)
            async with run.subscribe():
                r = await cc.append(client, run.request_id, 0, run_request(unique("full")))
                assert r.status_code == 503, r.text
                assert r.json()["code"] == "unavailable"
                assert "storage is full" in r.json()["message"], r.text
            metrics = (await client.get("/metrics")).text
        gauges = {
            line.split()[0]: float(line.split()[1])
            for line in metrics.splitlines()
            if line.startswith("cursor_byok_database_")
        }
        assert gauges["cursor_byok_database_limit_bytes"] == cap << 20
        assert gauges["cursor_byok_database_bytes"] >= cap << 20, gauges
        assert "at its size limit" in server.log()
    rows = await run_checks(str(work / "cursor-byok.toml"), env={})
    (size,) = [r for r in rows if r.name == "database size"]
    assert size.status == "FAIL" and f"of {cap} MiB" in size.detail, size
    assert "new runs are refused" in size.detail


@pytest.mark.parametrize("cap", [0, 100_000])
async def test_doctor_shows_the_size_under_the_cap(
    cap: int, tmp_path: Path, pg_cluster: Cluster
) -> None:
    db = pg_cluster.create_database(f"size_{cap}_{uuid.uuid4().hex[:6]}")
    cfg = tmp_path / "c.toml"
    cfg.write_text(brain_config("http://127.0.0.1:9", db=db, extra=f"database_max_mib = {cap}"))
    rows = await run_checks(str(cfg), env={})
    (size,) = [r for r in rows if r.name == "database size"]
    assert size.status == "OK", size
    assert ("no cap" in size.detail) == (cap == 0), size
