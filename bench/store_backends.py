"""SQLite against PostgreSQL in one run: commit latency and whole turns per second.

    .venv/bin/python bench/store_backends.py [--commits 300] [--turns 40]

Both backends on this machine, at their durable settings: SQLite with synchronous=FULL (an
fsync per durable commit) on a file in a temporary folder; PostgreSQL 15 on a throwaway
cluster (tests/support/postgres.py) with fsync on, over loopback TCP.

- commit: `commit_input` of one conversation, one after another (state 1 KB, one message of
  500 B, one LLM call record of 20 KB), durable; then 16 conversations committing at once.
- turns: `cursor-byok serve` on each database with the scripted upstream (tests/support/
  brain.py, short answers), `--turns` turns one after another over the HTTP/1.1 shim, each a
  new conversation: run request, streamed answer, turn_ended.

Prints a markdown section; figures go to docs/benchmarks-server.md.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.test_shim import ShimRun, http, run_request  # noqa: E402
from tests.support.live import ThreadedUpstream, brain_config, server_process  # noqa: E402
from tests.support.postgres import cluster  # noqa: E402

from cursor_byok.store import AnyStore, LLMCallRecord, open_store  # noqa: E402

STATE = os.urandom(1024)
MESSAGE = os.urandom(500)
REQUEST = os.urandom(20 * 1024)
REQUEST_HASH = hashlib.sha256(REQUEST).hexdigest()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def commit(store: AnyStore, cid: str, version: int) -> float:
    call = LLMCallRecord(
        call_id=f"{cid}:{version}",
        conversation_id=cid,
        turn_id="t",
        request=REQUEST,
        request_hash=REQUEST_HASH,
        messages_hash="m" * 64,
        status="planned",
        created_at_ms=version,
    )
    t = time.perf_counter()
    r = await store.commit_input(
        cid,
        input_id=f"i{version}",
        expected_version=version,
        state=STATE,
        append_messages=(MESSAGE,),
        expected_message_count=version,
        result=b"r",
        llm_calls=(call,) if version else (),
    )
    assert r.status == "committed", r
    return (time.perf_counter() - t) * 1000


async def commits(database: str, n: int) -> tuple[list[float], float]:
    store = await open_store(database)
    try:
        sequential = [await commit(store, "seq", v) for v in range(n)]

        async def one(cid: str) -> None:
            for v in range(n // 16 + 1):
                await commit(store, cid, v)

        t = time.perf_counter()
        await asyncio.gather(*(one(f"par{i}") for i in range(16)))
        rate = 16 * (n // 16 + 1) / (time.perf_counter() - t)
    finally:
        await store.close()
    return sequential, rate


async def turns(database: str, n: int, upstream_url: str, work: Path) -> tuple[list[float], float]:
    latencies: list[float] = []
    with server_process(brain_config(upstream_url, db=database), work) as server:
        async with http(server) as client:
            started = time.perf_counter()
            for i in range(n):
                run = ShimRun(client)
                t = time.perf_counter()
                async with run.subscribe() as reader:
                    await run.append(run_request(f"[brief] turn {i}", str(uuid.uuid4())))
                    end = await reader.wait_end(30)
                assert end == {} and reader.turn_ended, end
                latencies.append((time.perf_counter() - t) * 1000)
            rate = n / (time.perf_counter() - started)
    return latencies, rate


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, cluster(fsync=True) as pg, ThreadedUpstream() as up:
        root = Path(tmp)
        databases = {
            "SQLite (FULL)": str(root / "bench.db"),
            "PostgreSQL 15 (fsync on)": pg.create_database("bench_commits"),
        }
        for name, database in databases.items():
            seq, rate = await commits(database, args.commits)
            turn_db = (
                str(root / "turns.db")
                if database.endswith(".db")
                else pg.create_database("bench_turns")
            )
            work = root / f"work-{len(rows)}"
            work.mkdir()
            lat, turn_rate = await turns(turn_db, args.turns, up.base_url, work)
            rows.append(
                f"| {name} | {statistics.median(seq):.2f} | {pct(seq, 99):.2f} | {rate:.0f} "
                f"| {statistics.median(lat):.1f} | {turn_rate:.1f} |"
            )
        startup = pg.startup_s
    print("## Store backends: SQLite and PostgreSQL\n")
    print(
        f"{args.commits} sequential durable commits, then 16 conversations at once; "
        f"{args.turns} whole turns one after another over the shim "
        f"(PostgreSQL cluster started in {startup:.1f} s).\n"
    )
    print(
        "| backend | commit p50 ms | commit p99 ms | commits/s (16 at once) "
        "| turn p50 ms | turns/s |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    asyncio.run(main())
