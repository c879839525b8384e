"""Store commit benchmark: prints a markdown table (figures go into docs/store.md).

    .venv/bin/python bench/store_commit.py [--seconds 3] [--sync FULL NORMAL]

Scenarios (real files in a temporary directory, realistic payloads: state ~1 KB, 1-2 messages
of ~500 B, one llm_call record with ~20 KB of request bytes per commit):
  throughput  N asyncio tasks, each committing sequentially to its own conversation
  history     sequential commit latency on a conversation with 10 vs 5,000 messages
  load        load() latency with 10 vs 5,000 messages (reader thread vs inline sqlite3)
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cursor_byok.store import LLMCallRecord, SQLiteStore
from cursor_byok.store.sqlite import Synchronous

STATE = os.urandom(1024)
MESSAGE = os.urandom(500)
REQUEST = os.urandom(20 * 1024)
REQUEST_HASH = hashlib.sha256(REQUEST).hexdigest()
LIMIT = 1.5  # on the p50 and mean latency ratio 5,000 / 10 messages (p99 is reported only)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class Conversation:
    def __init__(self, store: SQLiteStore, cid: str) -> None:
        self.store, self.cid, self.version, self.count = store, cid, 0, 0

    async def commit(
        self, messages: tuple[bytes, ...] | None = None, with_call: bool = True
    ) -> float:
        msgs = messages if messages is not None else (MESSAGE,) * (1 + self.version % 2)
        call = LLMCallRecord(
            call_id=f"{self.cid}:{self.version}",
            conversation_id=self.cid,
            turn_id="t",
            request=REQUEST,
            request_hash=REQUEST_HASH,
            messages_hash=REQUEST_HASH,
            status="planned",
            created_at_ms=0,
        )
        t0 = time.perf_counter()
        r = await self.store.commit_input(
            self.cid,
            input_id=f"in:{self.version}",
            expected_version=self.version,
            state=STATE,
            append_messages=msgs,
            expected_message_count=self.count,
            result=b"r",
            llm_calls=(call,) if self.version and with_call else (),
        )
        dt = time.perf_counter() - t0
        assert r.status == "committed", r
        self.version, self.count = r.version, self.count + len(msgs)
        return dt


async def throughput(
    path: Path, sync: Synchronous, tasks: int, seconds: float, small: bool = False
) -> dict[str, float]:
    store = await SQLiteStore.open(path, synchronous=sync)
    convs = [Conversation(store, f"c{i}") for i in range(tasks)]
    for c in convs:  # create the conversations outside the measurement
        await c.commit()
    before = store.stats()
    lat: list[float] = []
    stop = time.perf_counter() + seconds

    async def run(c: Conversation) -> None:
        while time.perf_counter() < stop:
            lat.append(await c.commit((MESSAGE,) if small else None, with_call=not small))

    t0 = time.perf_counter()
    await asyncio.gather(*(run(c) for c in convs))
    elapsed = time.perf_counter() - t0
    after = store.stats()
    await store.close()
    batches = after.batches - before.batches
    return {
        "rate": len(lat) / elapsed,
        "p50": pct(lat, 50) * 1000,
        "p99": pct(lat, 99) * 1000,
        "batch": (after.jobs - before.jobs) / max(1, batches),
    }


async def history(path: Path, sync: Synchronous, commits: int) -> dict[int, list[float]]:
    """Two conversations in one database, 10 and 5,000 messages, committed to alternately so
    both see the same WAL, checkpoints and disk; one 500 B message + one call record each."""
    store = await SQLiteStore.open(path, synchronous=sync)
    convs = {10: Conversation(store, "short"), 5000: Conversation(store, "long")}
    for size, c in convs.items():
        while c.count < size:
            await c.commit((MESSAGE,) * min(500, size - c.count))
    lat: dict[int, list[float]] = {10: [], 5000: []}
    for i in range(commits + 50):
        for size, c in convs.items():
            dt = await c.commit((MESSAGE,))
            if i >= 50:  # warm-up
                lat[size].append(dt)
    await store.close()
    return lat


async def loads(path: Path, size: int, n: int) -> dict[str, float]:
    store = await SQLiteStore.open(path)
    c = Conversation(store, "l")
    while c.count < size:
        await c.commit((MESSAGE,) * min(500, size - c.count))
    threaded = []
    for _ in range(n):
        t0 = time.perf_counter()
        rec = await store.load("l")
        threaded.append(time.perf_counter() - t0)
        assert rec is not None and len(rec.messages) == size
    conn = sqlite3.connect(path, isolation_level=None)
    inline = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.execute("BEGIN")
        conn.execute("SELECT version, state FROM conversations WHERE conversation_id='l'")
        rows = conn.execute(
            "SELECT body FROM messages WHERE conversation_id='l' ORDER BY seq"
        ).fetchall()
        conn.execute("COMMIT")
        inline.append(time.perf_counter() - t0)
        assert len(rows) == size
    conn.close()
    await store.close()
    return {
        "thread_p50": pct(threaded, 50) * 1000,
        "inline_p50": pct(inline, 50) * 1000,
    }


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--commits", type=int, default=300, help="commits per history size")
    ap.add_argument("--sync", nargs="+", default=["FULL", "NORMAL"], choices=["FULL", "NORMAL"])
    ap.add_argument("--dir", default=None, help="where to put the databases (default: tmp)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="store-bench-", dir=args.dir))
    print(
        f"machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}, databases in {tmp}\n"
    )
    print("| synchronous | scenario | commits/s | p50 ms | p99 ms | jobs/batch |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    n = 0
    failed = False
    scenarios = [(1, False), (50, False), (50, True)]
    for sync in args.sync:
        for tasks, small in scenarios:
            n += 1
            r = await throughput(tmp / f"t{n}.db", sync, tasks, args.seconds, small)
            what = f"{tasks} conversation{'s' if tasks > 1 else ''}"
            what += ", no 20 KB call record" if small else ""
            print(
                f"| {sync} | {what} | {r['rate']:,.0f} | "
                f"{r['p50']:.2f} | {r['p99']:.2f} | {r['batch']:.1f} |"
            )
            sys.stdout.flush()
    print()
    print("| synchronous | history (messages) | p50 ms | p99 ms | mean ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for sync in args.sync:
        n += 1
        lat = await history(tmp / f"h{n}.db", sync, args.commits)
        for size in (10, 5000):
            xs = lat[size]
            print(
                f"| {sync} | {size:,} | {pct(xs, 50) * 1000:.2f} | {pct(xs, 99) * 1000:.2f} | "
                f"{statistics.fmean(xs) * 1000:.2f} |"
            )
        ratios = [
            f(lat[5000]) / f(lat[10])
            for f in (
                lambda x: pct(x, 50),
                lambda x: pct(x, 99),
                statistics.fmean,
            )
        ]
        print(
            f"| {sync} | ratio 5,000 / 10 | {ratios[0]:.2f} | {ratios[1]:.2f} | {ratios[2]:.2f} |"
        )
        sys.stdout.flush()
    print()
    print("| load() of | reader thread p50 ms | inline sqlite3 p50 ms |")
    print("| ---: | ---: | ---: |")
    for size in (10, 5000):
        n += 1
        r = await loads(tmp / f"l{n}.db", size, 200)
        print(f"| {size:,} messages | {r['thread_p50']:.3f} | {r['inline_p50']:.3f} |")
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    print(f"\nlimit on the p50 and mean ratios 5,000 / 10: {LIMIT}")
    if failed:
        print("FAIL: commit latency grows with history", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
