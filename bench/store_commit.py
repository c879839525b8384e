"""Store commit benchmark: prints a markdown table (figures go into docs/store.md).

    .venv/bin/python bench/store_commit.py [--seconds 3] [--sync FULL NORMAL]
    .venv/bin/python bench/store_commit.py --toggle [--dir /dev/shm] [--commits 2000] [--rounds 5]

Scenarios (real files in a temporary directory, realistic payloads: state ~1 KB, 1-2 messages
of ~500 B, one llm_call record with ~20 KB of request bytes per commit):
  throughput  N asyncio tasks, each committing sequentially to its own conversation
  history     sequential commit latency on a conversation with 10 vs 5,000 messages
  load        load() latency with 10 vs 5,000 messages (reader thread vs inline sqlite3)
  --toggle    only this: what switching PRAGMA synchronous between FULL and NORMAL costs the
              writer, one commit per batch: all durable, all non-durable, alternating (a
              switch before every batch), uniform but switched away and back before every
              batch, and the same patterns on a NORMAL store (never switches: the control);
              plus the pragma alone on a connection
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

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


class ToggleRun(NamedTuple):
    sync: Synchronous  # how the store is opened
    name: str
    durable: Callable[[int], bool]  # of commit i
    twice: bool = False  # switch away and back before every batch (durability unchanged)


TOGGLE_RUNS = (
    ToggleRun("FULL", "all durable", lambda i: True),
    ToggleRun("FULL", "all non-durable", lambda i: False),
    ToggleRun("FULL", "alternating", lambda i: i % 2 == 0),
    ToggleRun("FULL", "all durable, switched twice", lambda i: True, twice=True),
    ToggleRun("FULL", "all non-durable, switched twice", lambda i: False, twice=True),
    # the control: a NORMAL store never switches (nor fsyncs), whatever the pattern
    ToggleRun("NORMAL", "all durable", lambda i: True),
    ToggleRun("NORMAL", "all non-durable", lambda i: False),
    ToggleRun("NORMAL", "alternating", lambda i: i % 2 == 0),
)


async def toggle_run(
    path: Path, run: ToggleRun, commits: int
) -> tuple[list[float], list[float], list[float]]:
    """Sequential commits (one job per batch) of one conversation: state 1 KB, one 500 B
    message. Returns the latencies of the durable and the non-durable commits, and the time
    of each switching call of the writer (measured around it)."""
    store = await SQLiteStore.open(path, synchronous=run.sync)
    writer = store._writer
    switch = writer._set_synchronous
    switches: list[float] = []

    def timed(conn: sqlite3.Connection, durable: bool) -> None:
        t0 = time.perf_counter()
        before = writer._sync
        if run.twice:  # away from the current level; the writer's own call comes back to it
            away: Synchronous = "NORMAL" if before == "FULL" else "FULL"
            conn.execute(f"PRAGMA synchronous = {away}")
            writer._sync = away
        switch(conn, durable)
        if writer._sync != before or run.twice:
            switches.append(time.perf_counter() - t0)

    writer._set_synchronous = timed  # type: ignore[method-assign]
    version = count = 0
    lat: dict[bool, list[float]] = {True: [], False: []}
    for i in range(commits + 50):
        d = run.durable(i)
        t0 = time.perf_counter()
        r = await store.commit_input(
            "t",
            input_id=f"in:{i}",
            expected_version=version,
            state=STATE,
            append_messages=(MESSAGE,),
            expected_message_count=count,
            result=b"r",
            durable=d,
        )
        dt = time.perf_counter() - t0
        assert r.status == "committed", r
        version, count = r.version, count + 1
        if i >= 50:  # warm-up
            lat[d].append(dt)
    synced = store.stats().synced_batches
    await store.close()
    assert synced == (sum(map(run.durable, range(commits + 50))) if run.sync == "FULL" else 0)
    return lat[True], lat[False], switches


def pragma_alone(path: Path, n: int) -> float:
    """Mean seconds of one `PRAGMA synchronous = X` that changes the level, on a WAL
    connection with the store's schema."""
    conn = sqlite3.connect(path, isolation_level=None)
    t0 = time.perf_counter()
    for i in range(n):
        conn.execute("PRAGMA synchronous = FULL" if i % 2 else "PRAGMA synchronous = NORMAL")
    dt = (time.perf_counter() - t0) / n
    conn.close()
    return dt


async def toggle_main(tmp: Path, commits: int, rounds: int) -> None:
    """What the writer's switch between FULL and NORMAL costs. "alternating" switches before
    every batch but also puts a durable batch (an fsync) before every non-durable one;
    "switched twice" switches away and back before every batch of a uniform pattern, so the
    fsyncs stay those of the uniform pattern; the NORMAL store never switches (the control:
    its differences are the noise of the method). Differences are per kind of batch, on the
    p50 (the mean moves with whatever else the machine runs)."""
    us = 1e6
    print(
        "| store | pattern | durable p50 µs | non-durable p50 µs "
        "| durable mean µs | non-durable mean µs |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    totals: dict[tuple[str, str], tuple[list[float], list[float]]] = {
        (r.sync, r.name): ([], []) for r in TOGGLE_RUNS
    }
    switches: dict[tuple[str, str], list[float]] = {(r.sync, r.name): [] for r in TOGGLE_RUNS}
    k = 0
    for _ in range(rounds):  # the runs take turns, so drift of the machine hits all of them
        for run in TOGGLE_RUNS:
            k += 1
            durable, quick, sw = await toggle_run(tmp / f"s{k}.db", run, commits)
            totals[run.sync, run.name][0].extend(durable)
            totals[run.sync, run.name][1].extend(quick)
            switches[run.sync, run.name].extend(sw)

    def cell(xs: list[float], f: Callable[[list[float]], float]) -> str:
        return f"{f(xs) * us:,.0f}" if xs else "-"

    def p50(xs: list[float]) -> float:
        return pct(xs, 50)

    for (sync, name), (durable, quick) in totals.items():
        print(
            f"| {sync} | {name} | {cell(durable, p50)} | {cell(quick, p50)} | "
            f"{cell(durable, statistics.fmean)} | {cell(quick, statistics.fmean)} |"
        )
    print()

    def diff(sync: str, pattern: str, durable: bool) -> float:
        uniform = "all durable" if durable else "all non-durable"
        i = 0 if durable else 1
        return (p50(totals[sync, pattern][i]) - p50(totals[sync, uniform][i])) * us

    for sync in ("FULL", "NORMAL"):
        d, q = diff(sync, "alternating", True), diff(sync, "alternating", False)
        print(
            f"{sync} store, alternating minus uniform (p50): durable batches {d:+.1f} µs, "
            f"non-durable batches {q:+.1f} µs, per batch {(d + q) / 2:+.1f} µs"
        )
    d2 = diff("FULL", "all durable, switched twice", True)
    q2 = diff("FULL", "all non-durable, switched twice", False)
    print(
        f"FULL store, switched twice minus uniform (p50): durable batches {d2:+.1f} µs, "
        f"non-durable batches {q2:+.1f} µs, per switch {(d2 + q2) / 4:+.1f} µs"
    )
    one = switches["FULL", "alternating"]
    two = switches["FULL", "all durable, switched twice"]
    print(
        f"the switch inside the writer (alternating): {pct(one, 50) * us:.1f} µs p50, "
        f"{statistics.fmean(one) * us:.1f} µs mean, {pct(one, 99) * us:.1f} µs p99 "
        f"over {len(one):,} switches; two switches: {pct(two, 50) * us:.1f} µs p50"
    )
    print(f"PRAGMA synchronous alone: {pragma_alone(tmp / 's1.db', 20_000) * us:.2f} µs")


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--commits", type=int, default=300, help="commits per history size")
    ap.add_argument("--sync", nargs="+", default=["FULL", "NORMAL"], choices=["FULL", "NORMAL"])
    ap.add_argument("--dir", default=None, help="where to put the databases (default: tmp)")
    ap.add_argument("--toggle", action="store_true", help="only the synchronous switch")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the --toggle patterns")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="store-bench-", dir=args.dir))
    print(
        f"machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}, databases in {tmp}\n"
    )
    if args.toggle:
        await toggle_main(tmp, args.commits, args.rounds)
        shutil.rmtree(tmp)
        return 0
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
