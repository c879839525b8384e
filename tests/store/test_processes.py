"""Two server processes on one database (a SQLite file, a PostgreSQL database); durability
across kill -9."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from cursor_byok.store import open_store

WORKER = Path(__file__).with_name("_worker.py")


async def test_two_processes_never_both_append(tmp_path: Path, database: str) -> None:
    db = database
    await (await open_store(db)).close()  # migrate once up front
    n = 150
    go = tmp_path / "go"
    procs = []
    for name in ("A", "B"):
        ready = tmp_path / f"ready-{name}"
        cmd = [sys.executable, str(WORKER), "race", str(db), name, str(n), str(ready), str(go)]
        procs.append((name, ready, subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)))
    deadline = time.monotonic() + 30
    while not all(ready.exists() for _, ready, _ in procs):
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.01)
    go.touch()
    won: dict[str, list[int]] = {}
    conflicts = 0
    for name, _, proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        report = json.loads(out.strip().splitlines()[-1])
        won[name] = report["won"]
        conflicts += report["conflicts"]
    assert conflicts > 0, "the processes did race for the same versions"
    all_won = won["A"] + won["B"]
    assert sorted(all_won) == list(range(1, n + 1)), "each version committed exactly once"
    async with await open_store(db) as s:
        rec = await s.load("shared")
    assert rec is not None
    assert rec.version == n
    owner = {v: name for name, vs in won.items() for v in vs}
    assert rec.messages == tuple(f"{owner[v]}:{v}".encode() for v in range(1, n + 1))
    assert rec.state == f"{owner[n]}@{n}".encode()


async def test_acknowledged_commits_survive_kill_9(database: str) -> None:
    db = database
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), "acks", str(db), "100000"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    last = 0
    for line in proc.stdout:
        last = int(line.split()[1])
        if last >= 40:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    async with await open_store(db) as s:
        rec = await s.load("durable")
    assert rec is not None
    assert rec.version >= last
    assert len(rec.messages) == rec.version
    assert [m[2000:] for m in rec.messages] == [str(v).encode() for v in range(rec.version)]
