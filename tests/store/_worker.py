"""Run as a separate server process by test_processes.py (not collected by pytest).

race <db> <name> <n> <ready-file> <go-file>: load and commit until the shared conversation
reaches version n, racing the other process; print the versions won and the
conflicts seen as JSON.
acks <db> <n>: commit n times sequentially, printing "ack <version>" after each commit returns.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

from cursor_byok.store import SQLiteStore, open_store


async def race(db: str, name: str, n: int, ready: Path, go: Path) -> None:
    store = (
        await open_store(db)
        if db.startswith("postgresql://")
        else await SQLiteStore.open(db, busy_timeout_ms=10_000)
    )
    ready.touch()
    deadline = time.monotonic() + 30
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go signal")
        await asyncio.sleep(0.001)
    won: list[int] = []
    conflicts = 0
    attempt = 0
    while True:
        # Like the runner: (re)load, then commit against the version just read. Both processes
        # therefore race with the same expected version; the CAS lets exactly one win.
        rec = await store.load("shared")
        v = 0 if rec is None else rec.version
        if v >= n:
            break
        r = await store.commit_input(
            "shared",
            input_id=f"{name}:{attempt}",
            expected_version=v,
            state=f"{name}@{v + 1}".encode(),
            append_messages=[f"{name}:{v + 1}".encode()],
            expected_message_count=v,
            result=b"",
        )
        attempt += 1
        if r.status == "committed":
            won.append(r.version)
        elif r.status == "conflict":
            conflicts += 1
        else:
            raise SystemExit(f"unexpected {r}")
        # A short random pause, as between two real inputs, lets the other process in; without
        # it SQLite's busy handler (sleep and retry) lets one process run ahead of the other.
        await asyncio.sleep(random.random() * 0.002)
    await store.close()
    print(json.dumps({"won": won, "conflicts": conflicts}), flush=True)


async def acks(db: str, n: int) -> None:
    store = await open_store(db)
    payload = os.urandom(2000)
    for v in range(n):
        r = await store.commit_input(
            "durable",
            input_id=f"i{v}",
            expected_version=v,
            state=b"s",
            append_messages=[payload + str(v).encode()],
            expected_message_count=v,
            result=b"",
        )
        print(f"ack {r.version}", flush=True)


def main() -> None:
    mode = sys.argv[1]
    if mode == "race":
        _, _, db, name, n, ready, go = sys.argv
        asyncio.run(race(db, name, int(n), Path(ready), Path(go)))
    elif mode == "acks":
        asyncio.run(acks(sys.argv[2], int(sys.argv[3])))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
