"""System calls and SQLite statements per turn: the floor relay against our server.

    .venv/bin/python bench/_turn_syscalls.py [--turns 100] [--base REF] [--db DIR]

For each server (bench/_relay.py: the floor relay, this tree's server, and with `--base` that
commit's), after 20 warm-up turns: `strace -f -c` attached to the server process (all its
threads) while the Node client runs `--turns` turns, then the calls per turn of each system
call (futex, epoll_wait, reads, writes, fsyncs, total). strace slows every call down, so
only the counts mean something, not the times (and a slower server may read its upstream in
fewer, larger pieces).

Then SQLite: each server once more (a new process of the same source), started through a
wrapper that gives every `sqlite3.connect` connection a trace callback (nothing in src/
changes), counting each statement by kind (its first word and table; PRAGMA with its value)
over the same number of turns.

Not run by `bench/run` (its name starts with `_`): it needs strace and ptrace rights.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.live import brain_config  # noqa: E402

import _relay  # noqa: E402
import server_overhead as so  # noqa: E402

WARMUP_TURNS = 20
SHOWN = ("futex", "epoll_wait", "recvfrom", "read", "sendto", "write", "writev", "sched_yield")
SHOWN += ("fdatasync", "fsync", "pwrite64", "pread64")

# `python -c SQL_TRACE serve ...`: the CLI with every sqlite3 connection traced.
SQL_TRACE = """
import collections, json, os, re, sqlite3, sys, threading, time

if os.environ.get("SQL_TRACE_SRC"):  # another version's src directory
    sys.path.insert(0, os.environ["SQL_TRACE_SRC"])

counts = collections.Counter()
lock = threading.Lock()
out = os.environ["SQL_TRACE_OUT"]
TABLE = re.compile(r"\\b(?:INTO|UPDATE|FROM)\\s+([\\w.]+)", re.I)

def kind(statement):
    words = statement.split()
    if not words:
        return "?"
    first = words[0].upper()
    if first.startswith("--"):
        return "(trigger)"
    if first == "PRAGMA":
        return " ".join(words[:4]).rstrip(";")  # with its value when it sets one
    if first in ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"):
        return " ".join(words[:2]).upper() if first == "BEGIN" else first
    table = TABLE.search(statement)
    return f"{first} {table.group(1)}" if table else first

def trace(statement):
    key = kind(statement)
    with lock:
        counts[key] += 1

_connect = sqlite3.connect

def connect(*args, **kwargs):
    conn = _connect(*args, **kwargs)
    conn.set_trace_callback(trace)
    return conn

sqlite3.connect = connect

def dump():
    while True:
        time.sleep(0.05)
        with lock:
            snapshot = dict(counts)
        with open(out + ".tmp", "w") as f:
            json.dump(snapshot, f)
        os.replace(out + ".tmp", out)

threading.Thread(target=dump, daemon=True).start()
from cursor_byok.cli import main
sys.exit(main(sys.argv[1:]))
"""


def strace_counts(s: _relay.Launched, upstream_url: str, turns: int) -> Counter[str]:
    """System calls by name while `turns` turns run (after the warm-up), all threads."""
    so.node_turns(s.port, upstream_url, WARMUP_TURNS)
    with tempfile.NamedTemporaryFile(suffix=".strace") as f:
        tracer = subprocess.Popen(
            ["strace", "-f", "-c", "-o", f.name, "-p", str(s.pid)],
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)  # attached to every thread by then
        try:
            # node_turns runs 5 warm-up turns of its own: ask for turns - 5 so `turns` run
            so.node_turns(s.port, upstream_url, turns - 5)
        finally:
            tracer.send_signal(signal.SIGINT)
            _, err = tracer.communicate(timeout=30)
        text = Path(f.name).read_text()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            counts[parts[-1]] = int(parts[3])
    if not counts:
        raise RuntimeError(f"strace gave nothing: {err.strip()[-500:]}")
    return counts


@contextlib.contextmanager
def traced_server(
    of: _relay.Launched, upstream_url: str, db_dir: Path, out: Path
) -> Iterator[_relay.Launched]:
    """Another process of the server `of` (same source), its sqlite3 connections traced."""
    work = Path(tempfile.mkdtemp(prefix="sql-trace-", dir=db_dir))
    try:
        config = work / "cursor-byok.toml"
        config.write_text(brain_config(upstream_url, db=work / "db"))
        cmd = [sys.executable, "-c", SQL_TRACE, "serve", "--config", str(config)]
        env = {**os.environ, "SQL_TRACE_OUT": str(out)}
        if of.src is not None:
            env["SQL_TRACE_SRC"] = str(of.src)
        with so.launched_process(cmd, work, f"{of.name}, SQL traced", env) as (port, pid):
            yield _relay.Launched(of.name, port, pid, of.src)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def sql_per_turn(of: _relay.Launched, upstream_url: str, db_dir: Path, turns: int) -> Counter[str]:
    """SQLite statements by kind while `turns` turns run (after the warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sql.json"
        with traced_server(of, upstream_url, db_dir, out) as traced:
            so.node_turns(traced.port, upstream_url, WARMUP_TURNS)
            before = sql_counts(out)
            so.node_turns(traced.port, upstream_url, turns - 5)
            return sql_counts(out) - before


def sql_counts(path: Path) -> Counter[str]:
    time.sleep(0.3)  # the dump thread writes every 50 ms
    return Counter(json.loads(path.read_text())) if path.exists() else Counter()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--base", default=None)
    parser.add_argument("--db", type=Path, default=Path("/dev/shm"))
    args = parser.parse_args(argv)
    if not shutil.which("strace") or not so.node_available():
        print("bench/_turn_syscalls.py needs strace and node", file=sys.stderr)
        return 2
    turns = max(args.turns, 6)
    per_turn: dict[str, Counter[str]] = {}
    with contextlib.ExitStack() as stack:
        upstream_url, _ = stack.enter_context(so.upstream_process())
        servers, missing = _relay.start_all(stack, upstream_url, args.db, args.base)
        for s in servers:
            per_turn[s.name] = strace_counts(s, upstream_url, turns)
            print(
                f"{s.name}: {sum(per_turn[s.name].values()) / turns:.1f} calls per turn",
                file=sys.stderr,
            )
        sql = {
            s.name: sql_per_turn(s, upstream_url, args.db, turns)
            for s in servers
            if s.name != _relay.RELAY
        }
    names = sorted({n for c in per_turn.values() for n in c}, key=lambda n: (n not in SHOWN, n))
    shown = [n for n in SHOWN if n in names]
    print(f"## System calls per turn ({turns} turns, strace -f -c, all threads)")
    print()
    print("| server | " + " | ".join(shown) + " | all |")
    print("|---|" + "---:|" * (len(shown) + 1))
    for name, counts in per_turn.items():
        cells = [f"{counts.get(n, 0) / turns:.1f}" for n in shown]
        print(f"| {name} | {' | '.join(cells)} | {sum(counts.values()) / turns:.1f} |")
    for line in missing:
        print(f"- {line}")
    print()
    print(f"## SQLite statements per turn ({turns} turns, sqlite3 trace callback)")
    print()
    print("| statement | " + " | ".join(sql) + " |")
    print("|---|" + "---:|" * len(sql))
    kinds = {k for c in sql.values() for k in c}
    for key in sorted(kinds, key=lambda k: -max(c[k] for c in sql.values())):
        print(f"| {key} | " + " | ".join(f"{c[key] / turns:.2f}" for c in sql.values()) + " |")
    print("| all | " + " | ".join(f"{sum(c.values()) / turns:.2f}" for c in sql.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
