"""Does a turn's cost stay flat as an agent session grows? One tool call per turn, 1 KB results.

    .venv/bin/python bench/long_tool_session.py [--messages 2000] [--result 1024] [--every 100]
        [--ref REF] [--callgrind] [--profile DIR]

One conversation through `cursor-byok serve` (DB on tmpfs, a 10M-token window so no
compaction starts) and the scripted upstream (in its own process). Each turn: the user asks
`[tool Read {...}]`; the model says "Let me check." and calls Read; our client (the test
suite's HTTP/2 client, tests/e2e) answers the exec with `--result` bytes of code; the model's
second call quotes it; the turn ends. Four messages a turn (user, assistant with the call,
tool result, assistant), so 2,000 messages are 500 turns and about 1.1 MB of history.

Per window of `--every` messages: the medians of the first text delta (the run request sent
to the first text delta of the turn's first call), of the text after the result (the exec
reply sent to the second call's first delta) and of the whole turn, and the CPU per turn of
the server and of the upstream (/proc; the upstream's JSON parsing of the growing body is
part of the first-delta times, as a real provider's would be on any path). Then the growth
per 100 more messages (a least-squares slope over the windows).

- `--ref REF`: the server of that commit (bench/_baseline.py's venv) instead of this tree.
- `--callgrind`: the server under valgrind callgrind, counters dumped after each window: the
  instructions per turn per window, deterministic, so the slope is the code's, not the
  machine's (about 40x slower; timings then mean nothing and are not printed).
- `--patch MODULE:ATTR=EXPR`: an ablation (bench/_profile_turns.py), with `--callgrind` the
  instructions the replaced code costs per turn at each size of the history.
- `--keep-dumps DIR`: with `--callgrind`, each window's dump copied to DIR/windowN.callgrind
  (callgrind_annotate them to see which C functions grow).
- `--profile DIR`: cProfile of the event loop's thread for the first and the last window,
  written to DIR/first.pstats and DIR/last.pstats (what grows with the history).

Prints a markdown section on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.live import brain_config, free_port, probe_health_blocking  # noqa: E402

import _baseline  # noqa: E402
import _callgrind  # noqa: E402
import _profile_turns  # noqa: E402
import server_overhead as so  # noqa: E402

MESSAGES_PER_TURN = 4
WARMUP_TURNS = 5  # in a conversation of their own, before the measured one
WINDOW_TOKENS = 10_000_000
CODE_LINE = "    result = compute(items[index], options.get('mode', 'fast'))  # keep order\n"

# The server's interpreter runs this: cProfile windows on SIGUSR1 (start) / SIGUSR2 (stop and
# write argv[1].N, N = 1, 2, ...), then the CLI.
PROFILED = r"""
import cProfile, signal, sys
stem = sys.argv.pop(1)
state = {"n": 0, "p": None}
def start(*_):
    state["p"] = cProfile.Profile()
    state["p"].enable()
def stop(*_):
    state["p"].disable()
    state["n"] += 1
    state["p"].dump_stats(f"{stem}.{state['n']}")
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
from cursor_byok.cli import main
sys.exit(main(sys.argv[1:]))
"""


def serve_upstream() -> None:
    """Child mode: the brain upstream, keeping no request (a session's bodies add to 1 GB)."""
    from tests.support.brain import answer
    from tests.support.upstream import FakeUpstream, Received, Reply

    async def main() -> None:
        def forgetful(received: Received) -> Reply:
            upstream.requests.clear()
            return answer(received)

        upstream = FakeUpstream(forgetful)
        server = await asyncio.start_server(upstream._handle, "127.0.0.1", 0, backlog=256)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


@contextlib.contextmanager
def upstream() -> Iterator[tuple[str, int]]:
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve-upstream"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert child.stdout is not None
        yield f"http://127.0.0.1:{int(child.stdout.readline())}", child.pid
    finally:
        child.terminate()
        child.wait(10)


def config_text(upstream_url: str, db: Path | str, window: int = WINDOW_TOKENS) -> str:
    text = brain_config(upstream_url, db=db)
    if window < WINDOW_TOKENS:  # compaction on: the brain then reports the request's size
        text = text.replace('model = "brain-1"', 'model = "brain-small"')
    return text.replace("context_window = 128000", f"context_window = {window}", 1)


@contextlib.contextmanager
def server(
    python: Path,
    upstream_url: str,
    work: Path,
    *,
    callgrind: bool,
    profile: Path | None,
    patches: list[str],
    database: str | None = None,
    window: int = WINDOW_TOKENS,
) -> Iterator[tuple[int, int]]:
    config = work / "cursor-byok.toml"
    config.write_text(config_text(upstream_url, database or work / "db", window))
    if patches:
        if profile is not None:
            raise ValueError("--patch and --profile do not go together")
        cmd = [str(python), "-c", _profile_turns.WRAPPER, "\n".join(patches), "", "serve"]
    elif profile is not None:
        cmd = [str(python), "-c", PROFILED, str(profile / "window"), "serve"]
    else:
        cmd = [str(python), "-m", "cursor_byok", "serve"]
    cmd += ["--config", str(config)]
    if callgrind:
        with _callgrind.under_callgrind(cmd, work, {**os.environ, "PYTHONHASHSEED": "0"}) as s:
            yield s
        return
    port = free_port()
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)], cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        t0 = time.monotonic()
        while not probe_health_blocking("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() - t0 > 60:
                raise RuntimeError("the server did not start")
            time.sleep(0.05)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def result_text(size: int, turn: int) -> str:
    head = f"# file {turn}\n"
    body = (CODE_LINE * (size // len(CODE_LINE) + 1))[: max(0, size - len(head))]
    return head + body


class Driver:
    """One conversation over HTTP/2 `Run`, one turn at a time, answering the Read exec."""

    def __init__(self, port: int, result_bytes: int, timeout: float = 60.0) -> None:
        self.port = port
        self.timeout = timeout  # per wait; minutes under valgrind on a loaded machine
        self.result_bytes = result_bytes
        self.conversation_id = str(uuid.uuid4())

    async def turn(self, n: int) -> dict[str, float]:
        from tests.e2e.test_run_h2 import h2_run
        from tests.e2e.test_shim import exec_of, is_text, read_ok, run_request

        path = f"/w/src/module_{n}.py"
        prompt = f'turn {n}: [tool Read {{"path": "{path}"}}]'
        served: Any = type("Served", (), {"port": self.port})
        async with h2_run(served) as (stream, reader):
            t0 = time.monotonic()
            await stream.send(run_request(prompt, self.conversation_id))
            first = await reader.wait_for(is_text, self.timeout)
            ask = (await reader.wait_for(exec_of("read_args"), self.timeout)).exec_server_message
            t_reply = time.monotonic()
            await stream.send(read_ok(ask.id, path, result_text(self.result_bytes, n)))
            await reader.wait_end(2 * self.timeout)
            t_end = time.monotonic()
        stamps = [t for t, m in reader.events if is_text(m)]
        after = [t for t in stamps if t >= t_reply]
        if reader.error or not after:
            raise RuntimeError(f"turn {n} did not end well: {reader.error or reader.kinds}")
        first_at = next(t for t, m in reader.events if m is first)
        return {
            "first": (first_at - t0) * 1000,
            "after_result": (after[0] - t_reply) * 1000,
            "total": (t_end - t0) * 1000,
        }


def proc_stat(pid: int) -> tuple[int, int, int]:
    """utime and stime (ticks) and minor page faults of a process so far, all threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12]), int(fields[7])


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--result", type=int, default=1024, help="bytes of each tool result")
    parser.add_argument("--every", type=int, default=100, help="messages per window")
    parser.add_argument("--ref", default=None, help="a commit to run instead of this tree")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument(
        "--keep-dumps", type=Path, default=None, help="with --callgrind: copy each window's dump"
    )
    parser.add_argument(
        "--patch", action="append", default=[], help="an ablation, as bench/_profile_turns.py"
    )
    parser.add_argument(
        "--db", choices=("sqlite", "postgresql"), default="sqlite", help="the store's backend"
    )
    parser.add_argument(
        "--window", type=int, default=WINDOW_TOKENS, help="the model's window (small: compaction)"
    )
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_upstream:
        serve_upstream()
        return 0
    if args.ref:
        python = _baseline.prepare(args.ref).python
        label = args.ref
    else:
        venv = REPO / ".venv" / "bin" / "python"
        python = venv if venv.exists() else Path(sys.executable)
        label = "this tree"
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    turns_per_window = max(1, args.every // MESSAGES_PER_TURN)
    windows = max(1, args.messages // args.every)
    rows: list[dict[str, float]] = []
    scratch = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with contextlib.ExitStack() as stack:
        database = None
        if args.db == "postgresql":
            from tests.support import postgres

            cluster = stack.enter_context(postgres.cluster())
            database = cluster.create_database(f"long_{os.getpid()}")
        upstream_url, upstream_pid = stack.enter_context(upstream())
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="long-tool-", dir=scratch))
        port, pid = stack.enter_context(
            server(
                python,
                upstream_url,
                Path(tmp),
                callgrind=args.callgrind,
                profile=args.profile,
                patches=args.patch,
                database=database,
                window=args.window,
            )
        )
        timeout = 900.0 if args.callgrind else 60.0
        driver = Driver(port, args.result, timeout)

        async def drive() -> None:
            warm = Driver(port, args.result, timeout)  # imports, caches, the connection pool
            for n in range(WARMUP_TURNS):
                await warm.turn(n)
            turn = 0
            for w in range(windows):
                profiled = args.profile is not None and w in (0, windows - 1)
                if args.callgrind:
                    _callgrind._control("--zero", str(pid))
                if profiled:
                    os.kill(pid, signal.SIGUSR1)
                cpu0, up0 = so.cpu_seconds(pid), so.cpu_seconds(upstream_pid)
                st0, t_start = proc_stat(pid), time.monotonic()
                done = []
                for _ in range(turns_per_window):
                    done.append(await driver.turn(turn))
                    turn += 1
                cpu, up = so.cpu_seconds(pid) - cpu0, so.cpu_seconds(upstream_pid) - up0
                st = [b - a for a, b in zip(st0, proc_stat(pid), strict=True)]
                if profiled:
                    os.kill(pid, signal.SIGUSR2)
                row = {
                    "messages": w * turns_per_window * MESSAGES_PER_TURN,
                    "first": statistics.median(t["first"] for t in done),
                    "after_result": statistics.median(t["after_result"] for t in done),
                    "total": statistics.median(t["total"] for t in done),
                    "cpu": cpu / turns_per_window * 1000,
                    "upstream_cpu": up / turns_per_window * 1000,
                    "user": st[0] / so.CLK_TCK / turns_per_window * 1000,
                    "sys": st[1] / so.CLK_TCK / turns_per_window * 1000,
                    "faults": st[2] / turns_per_window,
                }
                if args.callgrind:
                    _callgrind._control("--dump", str(pid))
                    dumps = sorted(
                        Path(tmp).glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:])
                    )
                    row["instructions"] = _callgrind.summary(dumps[-1]) / turns_per_window
                    if args.keep_dumps is not None:
                        args.keep_dumps.mkdir(parents=True, exist_ok=True)
                        shutil.copy(dumps[-1], args.keep_dumps / f"window{w + 1}.callgrind")
                rows.append(row)
                print(
                    f"window {w + 1}/{windows}: {row['messages']} messages, first "
                    f"{row['first']:.2f} ms, cpu {row['cpu']:.2f} ms"
                    + (f", {row['instructions'] / 1e6:.2f} M" if args.callgrind else "")
                    + f" (monotonic {t_start:.2f}-{time.monotonic():.2f})",
                    file=sys.stderr,
                )

        asyncio.run(drive())
        if args.profile is not None:
            time.sleep(1.0)
            for n, name in ((1, "first"), (2, "last")):
                src = args.profile / f"window.{n}"
                if src.exists():
                    src.replace(args.profile / f"{name}.pstats")
    report(args, label, rows, turns_per_window)
    return 0


def report(
    args: argparse.Namespace, label: str, rows: list[dict[str, float]], per_window: int
) -> None:
    kb = args.result * (rows[-1]["messages"] // MESSAGES_PER_TURN) // 1024 if rows else 0
    patched = f"; ablation: {'; '.join(args.patch)}" if args.patch else ""
    print(f"## Long agent session, one tool call per turn ({label}{patched})\n")
    print(
        f"One conversation, {len(rows)} windows of {per_window} turns ({args.every} messages), "
        f"a Read per turn answered with {args.result} bytes; the last window starts at "
        f"{rows[-1]['messages'] if rows else 0} messages (~{kb} KB of tool results); window "
        f"{args.window:,} tokens"
        + (" (no compaction)" if args.window >= WINDOW_TOKENS else " (compaction on)")
        + ("; DB on tmpfs" if args.db == "sqlite" else "; PostgreSQL (a local cluster)")
        + f"; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end; "
        "medians of each window, ms."
        + (" Under callgrind: instructions only." if args.callgrind else "")
        + "\n"
    )
    if args.callgrind:
        print("| messages at window start | server instructions per turn |")
        print("|---:|---:|")
        for r in rows:
            print(f"| {r['messages']:.0f} | {r['instructions'] / 1e6:.2f} M |")
    else:
        print(
            "| messages at window start | first delta | text after the result | whole turn "
            "| server CPU/turn (user + sys) | page faults/turn | upstream CPU/turn |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r['messages']:.0f} | {r['first']:.2f} | {r['after_result']:.2f} "
                f"| {r['total']:.2f} | {r['cpu']:.2f} ({r['user']:.1f} + {r['sys']:.1f}) "
                f"| {r['faults']:.0f} | {r['upstream_cpu']:.2f} |"
            )
    print()
    if len(rows) >= 2:
        xs = [r["messages"] / 100 for r in rows]
        keys = (
            ["instructions"]
            if args.callgrind
            else ["first", "after_result", "total", "cpu", "sys", "faults", "upstream_cpu"]
        )
        names = {
            "instructions": ("server instructions per turn", 1e6, "M"),
            "first": ("first delta", 1.0, "ms"),
            "after_result": ("text after the result", 1.0, "ms"),
            "total": ("whole turn", 1.0, "ms"),
            "cpu": ("server CPU per turn", 1.0, "ms"),
            "sys": ("of it in the kernel", 1.0, "ms"),
            "faults": ("page faults per turn", 1.0, ""),
            "upstream_cpu": ("upstream CPU per turn", 1.0, "ms"),
        }
        parts = []
        for key in keys:
            name, scale, unit = names[key]
            s = slope(xs, [r[key] / scale for r in rows])
            parts.append(f"{name} {s:+.3f} {unit}")
        print("Per 100 more messages (least-squares slope over the windows): " + ", ".join(parts))
        print()


if __name__ == "__main__":
    raise SystemExit(main())
