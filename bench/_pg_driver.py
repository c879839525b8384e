"""Which PostgreSQL driver for the store: psycopg 3 against asyncpg on the store's statements.

    .venv/bin/python bench/_pg_driver.py [--commits 400] [--fsync on|off]

Starts a throwaway cluster (tests/support/postgres.py, fsync on) and times, with each driver,
the store's two hot paths: `commit_input` (find the input id, the version compare-and-set,
append two messages, record the input, in one transaction) and `load` (the conversation row
and its messages in one snapshot). psycopg runs the way the store runs it (a blocking
connection on a worker thread, `asyncio.to_thread` per operation); asyncpg runs natively on
the event loop. Prints the median and p95 per operation in ms. Figures: docs/store.md. Not
run by `bench/run` (its name starts with `_`): it chose the driver once.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import asyncpg  # noqa: E402
import psycopg  # noqa: E402
from tests.support.postgres import cluster  # noqa: E402

SCHEMA = """
CREATE TABLE conversations (conversation_id TEXT PRIMARY KEY, version BIGINT NOT NULL,
    state BYTEA NOT NULL, message_count BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL);
CREATE TABLE messages (conversation_id TEXT NOT NULL, seq BIGINT NOT NULL, body BYTEA NOT NULL,
    PRIMARY KEY (conversation_id, seq));
CREATE TABLE input_commits (conversation_id TEXT NOT NULL, input_id TEXT NOT NULL,
    committed_version BIGINT NOT NULL, result BYTEA NOT NULL,
    PRIMARY KEY (conversation_id, input_id));
"""
STATE = b"s" * 2000
BODY = b"m" * 600


def _summary(name: str, samples: list[float]) -> str:
    samples.sort()
    p95 = samples[int(len(samples) * 0.95) - 1]
    return f"{name:<28} median {statistics.median(samples):6.3f} ms   p95 {p95:6.3f} ms"


def _psycopg_commit(conn: psycopg.Connection[tuple[object, ...]], cid: str, v: int) -> None:
    with conn.transaction():
        conn.execute(
            "SELECT committed_version FROM input_commits WHERE conversation_id = %s "
            "AND input_id = %s",
            (cid, f"i{v}"),
        ).fetchone()
        cur = conn.execute(
            "UPDATE conversations SET version = version + 1, state = %s, message_count = "
            "message_count + 2, updated_at_ms = %s WHERE conversation_id = %s AND version = %s",
            (STATE, v, cid, v),
        )
        assert cur.rowcount == 1
        for i in range(2):
            conn.execute("INSERT INTO messages VALUES (%s, %s, %s)", (cid, 2 * (v - 1) + i, BODY))
        conn.execute(
            "INSERT INTO input_commits VALUES (%s, %s, %s, %s)", (cid, f"i{v}", v + 1, b"r")
        )


def _psycopg_load(conn: psycopg.Connection[tuple[object, ...]], cid: str) -> None:
    with conn.transaction():
        conn.execute("SELECT version, state FROM conversations WHERE conversation_id = %s", (cid,))
        conn.execute("SELECT body FROM messages WHERE conversation_id = %s ORDER BY seq", (cid,))


async def bench_psycopg(url: str, n: int) -> tuple[list[float], list[float]]:
    conn = await asyncio.to_thread(psycopg.connect, url, autocommit=True)
    conn.execute("INSERT INTO conversations VALUES ('p', 1, %s, 0, 0)", (STATE,))
    commits, loads = [], []
    for v in range(1, n + 1):
        t = time.perf_counter()
        await asyncio.to_thread(_psycopg_commit, conn, "p", v)
        commits.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await asyncio.to_thread(_psycopg_load, conn, "p")
        loads.append((time.perf_counter() - t) * 1000)
    conn.close()
    return commits, loads


async def bench_asyncpg(url: str, n: int) -> tuple[list[float], list[float]]:
    conn = await asyncpg.connect(url)
    await conn.execute("INSERT INTO conversations VALUES ('a', 1, $1, 0, 0)", STATE)
    commits, loads = [], []
    for v in range(1, n + 1):
        t = time.perf_counter()
        async with conn.transaction():
            await conn.fetchrow(
                "SELECT committed_version FROM input_commits WHERE conversation_id = $1 "
                "AND input_id = $2",
                "a",
                f"i{v}",
            )
            status = await conn.execute(
                "UPDATE conversations SET version = version + 1, state = $1, message_count = "
                "message_count + 2, updated_at_ms = $2 WHERE conversation_id = $3 "
                "AND version = $4",
                STATE,
                v,
                "a",
                v,
            )
            assert status == "UPDATE 1"
            for i in range(2):
                await conn.execute(
                    "INSERT INTO messages VALUES ($1, $2, $3)", "a", 2 * (v - 1) + i, BODY
                )
            await conn.execute(
                "INSERT INTO input_commits VALUES ($1, $2, $3, $4)", "a", f"i{v}", v + 1, b"r"
            )
        commits.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        async with conn.transaction():
            await conn.fetchrow(
                "SELECT version, state FROM conversations WHERE conversation_id = $1", "a"
            )
            await conn.fetch(
                "SELECT body FROM messages WHERE conversation_id = $1 ORDER BY seq", "a"
            )
        loads.append((time.perf_counter() - t) * 1000)
    await conn.close()
    return commits, loads


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=400)
    parser.add_argument("--fsync", choices=("on", "off"), default="on")
    args = parser.parse_args()
    with cluster(fsync=args.fsync == "on") as pg:
        url = pg.create_database("bench")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SCHEMA)
        print(
            f"cluster started in {pg.startup_s:.2f} s; fsync {args.fsync}, {args.commits} commits"
        )
        # Interleave rounds so the drift of a shared machine hits both drivers alike.
        results: dict[str, tuple[list[float], list[float]]] = {
            "psycopg": ([], []),
            "asyncpg": ([], []),
        }
        rounds = 4
        for _ in range(rounds):
            for name, fn in (("psycopg", bench_psycopg), ("asyncpg", bench_asyncpg)):
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("TRUNCATE conversations, messages, input_commits")
                c, lo = await fn(url, args.commits // rounds)
                results[name][0].extend(c)
                results[name][1].extend(lo)
        for name, (c, lo) in results.items():
            print(_summary(f"{name} commit_input", c))
            print(_summary(f"{name} load", lo))


if __name__ == "__main__":
    asyncio.run(main())
