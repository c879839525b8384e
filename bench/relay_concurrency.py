"""Many concurrent streaming runs: our server beside the floor relay, in one run.

    .venv/bin/python bench/relay_concurrency.py [--runs 1000 2000] [--connections 10]
                                                [--slow 3] [--client node|python]
                                                [--base REF] [--no-direct] [--repeat 2]

bench/server_overhead.py's concurrency measurement, against bench/floor_relay.py and
`cursor-byok serve` of this tree (and, with `--base REF`, the server of that commit) one after
the other, for each N in `--runs`: N runs at once over `--connections` HTTP/2 connections, each
asking the scripted upstream for `[slow S]` (its answer paced over S seconds, one chunk every
~S/14 s), so all runs overlap. Per server: the delay between consecutive text deltas of a run
at the client (p50 / p99 / max, and p99 as a ratio to the upstream's pacing), time to first
delta, the server's CPU (% of one core over the wall time, and ms per run) and its RSS. The
same N prompts straight to the upstream (one keep-alive socket each) are the reference row
unless `--no-direct`.

The client is Node's (bench/node_relay_client.mjs, nghttp2) by default: the pure-Python h2
client of bench/server_overhead.py (`--client python`) takes a large share of the 2 cores at
these N, and then its own lag shows up in the gaps. granian's HTTP/2
SETTINGS_MAX_CONCURRENT_STREAMS defaults to 200 per connection (`granian.http.HTTP2Settings`,
passed as `http2_settings=` to granian's Server); the relay sets 1000 (floor_relay.py
--max-streams) and our server 1024 (`server.http2_max_concurrent_streams`; commits before
issue 12 kept granian's 200, so more than 200 runs on one of their connections, e.g.
`--connections 2`, queue in the client and some are refused with REFUSED_STREAM). The
databases go to tmpfs (/dev/shm) by default. Stops by itself (a hard alarm at 450 s). Prints a
markdown section on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support import connect_client as cc  # noqa: E402

import _relay  # noqa: E402
import server_overhead as so  # noqa: E402

HARD_LIMIT_S = 450
TARGETS = {1000: 1.15, 2000: 1.3}  # p99 gap / pacing


@dataclass
class Run:
    first: float  # ms
    total: float  # ms
    ok: bool
    gaps: list[float]  # ms


@dataclass
class Figures:
    runs: list[Run]
    wall: float  # s
    cpu: float = float("nan")  # s of the server's CPU over the wall time
    rss_before: float = float("nan")  # MiB
    rss_peak: float = float("nan")


def prompt(i: int, slow: float) -> str:
    return f"[slow {slow}] concurrent {i}"


def pacing_ms(n: int, slow: float) -> float:
    """The brain spreads `slow` seconds over its chunks (tests/support/brain.py: the role, the
    text in 4-character deltas, stop, usage, [DONE], and one empty chunk for the pause): the
    pace a perfect relay keeps. (bench/server_overhead.py counts one chunk more, 15 for 14,
    so its "upstream pacing" is 200 ms where the brain waits 214 ms.)"""
    example = f"You said: {prompt(n // 2, slow)}"
    chunks = 1 + (len(example) + 3) // 4 + 3 + 1
    return slow / chunks * 1000


def _runs(raw: list[dict[str, Any]]) -> list[Run]:
    """The Node client's runs (its NaN times arrive as null)."""

    def ms(value: Any) -> float:
        return float(value) if isinstance(value, int | float) else float("nan")

    return [Run(ms(r["first"]), ms(r["total"]), bool(r["ok"]), list(r["gaps"])) for r in raw]


def node_concurrent(port: int, n: int, connections: int, slow: float) -> Figures:
    """N runs at once by bench/node_relay_client.mjs."""
    prompts = [prompt(i, slow) for i in range(n)]
    out = _relay.node(
        {
            "mode": "concurrent",
            "port": port,
            "upstream": None,
            "connections": connections,
            "prompts": prompts,
            "requests": [_relay.envelope_hex(p) for p in prompts],
        }
    )
    errors = Counter(str(r["error"]) for r in out["via"] if r.get("error"))
    for error, count in errors.most_common(5):
        print(f"  {count} runs failed: {error}", file=sys.stderr)
    return Figures(_runs(out["via"]), out["wall"] / 1000)


async def python_concurrent(port: int, n: int, connections: int, slow: float) -> Figures:
    """bench/server_overhead.py's client: our pure-Python h2 client, one task per run."""
    clients = [await cc.H2Client.connect("127.0.0.1", port) for _ in range(connections)]
    t0 = time.perf_counter()
    try:
        results = await asyncio.gather(
            *(so.server_turn(clients[i % connections], prompt(i, slow)) for i in range(n)),
            return_exceptions=True,
        )
    finally:
        wall = time.perf_counter() - t0
        for client in clients:
            await client.close()
    runs = []
    for r in results:
        if isinstance(r, so.Turn):
            gaps = [(b - a) * 1000 for a, b in zip(r.text_times, r.text_times[1:], strict=False)]
            runs.append(Run(r.ttft * 1000, r.total * 1000, r.ok, gaps))
        else:
            runs.append(Run(float("nan"), float("nan"), False, []))
    return Figures(runs, wall)


def measure(s: _relay.Launched, n: int, connections: int, slow: float, client: str) -> Figures:
    """N runs at once through one server, its CPU and RSS read around them."""
    peak = [so.rss_mib(s.pid)]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(0.1):
            peak.append(so.rss_mib(s.pid))

    sampling = threading.Thread(target=sampler, daemon=True)
    sampling.start()
    cpu0 = so.cpu_seconds(s.pid)
    try:
        if client == "node":
            via = node_concurrent(s.port, n, connections, slow)
        else:
            via = asyncio.run(python_concurrent(s.port, n, connections, slow))
        via.cpu = so.cpu_seconds(s.pid) - cpu0
    finally:
        stop.set()
        sampling.join()
    via.rss_before, via.rss_peak = peak[0], max(peak)
    return via


def direct_reference(upstream_url: str, n: int, slow: float) -> Figures | None:
    """The same N prompts straight to the upstream (Node's http, one socket per run)."""
    prompts = [prompt(i, slow) for i in range(n)]
    plan = {"mode": "concurrent", "upstream": upstream_url, "prompts": prompts, "requests": []}
    try:
        out = _relay.node(plan)
    except RuntimeError as exc:
        print(f"direct reference failed: {exc}", file=sys.stderr)
        return None
    return Figures(_runs(out["direct"]), out["wallDirect"] / 1000)


def pct(values: list[float], p: float) -> float:
    values = [v for v in values if not math.isnan(v)]
    return so.pct(values, p) if values else float("nan")


def row(name: str, f: Figures, n: int, paced: float) -> str:
    ok = [r for r in f.runs if r.ok]
    gaps = [g for r in ok for g in r.gaps]
    p99 = pct(gaps, 99)
    target = TARGETS.get(n)
    meets = "" if target is None else (" ✓" if p99 / paced <= target else " ✗")
    cpu = (
        f"{f.cpu / f.wall * 100:.0f} % / {f.cpu / n * 1000:.2f} ms" if not math.isnan(f.cpu) else ""
    )
    rss = f"{f.rss_before:.0f} / {f.rss_peak:.0f}" if not math.isnan(f.rss_peak) else ""
    return (
        f"| {n} | {name} | {len(ok)} / {n} | {f.wall:.2f} s | {pct(gaps, 50):.0f} | {p99:.0f} "
        f"| {max(gaps, default=float('nan')):.0f} | {p99 / paced:.2f}x{meets} "
        f"| {pct([r.first for r in ok], 50):.0f} | {pct([r.first for r in ok], 99):.0f} "
        f"| {cpu} | {rss} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--slow", type=float, default=3.0)
    parser.add_argument("--client", choices=("node", "python"), default=None)
    parser.add_argument("--db", type=Path, default=Path("/dev/shm"), help="where the databases go")
    parser.add_argument("--base", default=None, help="also measure the server of this commit")
    parser.add_argument("--no-base", action="store_true", help="ignore --base")
    parser.add_argument("--no-direct", action="store_true", help="no direct reference row")
    parser.add_argument(
        "--repeat", type=int, default=2, help="measurements per server and N (order reversed)"
    )
    args = parser.parse_args(argv)
    client = args.client or ("node" if so.node_available() else "python")
    if client == "node" and not so.node_available():
        print("--client node needs node", file=sys.stderr)
        return 2
    base = None if args.no_base else args.base

    def give_up(signum: int, frame: object) -> None:
        raise TimeoutError(f"benchmark still running after {HARD_LIMIT_S} s; stopped")

    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(HARD_LIMIT_S)
    lines: list[str] = []
    with contextlib.ExitStack() as stack:
        upstream_url, upstream = stack.enter_context(so.upstream_process())
        servers, missing = _relay.start_all(stack, upstream_url, args.db, base)
        for n in args.runs:
            paced = pacing_ms(n, args.slow)
            for rep in range(args.repeat):
                tag = f" #{rep + 1}" if args.repeat > 1 else ""
                for s in servers if rep % 2 == 0 else reversed(servers):
                    up0 = so.cpu_seconds(upstream.pid)
                    via = measure(s, n, args.connections, args.slow, client)
                    up = so.cpu_seconds(upstream.pid) - up0
                    lines.append(row(s.name + tag, via, n, paced))
                    print(
                        f"N={n} {s.name}{tag}: {lines[-1]} "
                        f"(upstream CPU {up / via.wall * 100:.0f} %)",
                        file=sys.stderr,
                    )
            if not args.no_direct and client == "node":
                plain = direct_reference(upstream_url, n, args.slow)
                if plain is not None:
                    lines.append(row("direct (no server)", plain, n, paced))
                    print(f"N={n} direct: {lines[-1]}", file=sys.stderr)
    header = [
        "## Concurrent streaming runs: our server beside the floor relay",
        "",
        f"N runs at once over {args.connections} HTTP/2 connections ({client} client), each "
        f"answer paced by the upstream over {args.slow:g} s (one chunk every "
        f"{pacing_ms(args.runs[0], args.slow):.0f} ms); servers one after the other "
        f"({args.repeat} times per N, the order reversed each time: rows #1, #2, ...), DB in "
        f"{args.db}. Gaps: ms between consecutive text deltas of a run at the client; the "
        "ratio is p99 gap / pacing (targets: "
        + ", ".join(f"≤ {t:g}x at {n}" for n, t in TARGETS.items())
        + "). CPU: the server process's utime + stime, % of one core over the wall time and "
        "ms per run. RSS before / peak, MiB. The relay advertises 1000 concurrent streams per "
        "connection, our server 1024 (commits before issue 12: granian's default of 200).",
        "",
        "| N | server | completed | wall | gap p50 | gap p99 | gap max | p99 / pacing "
        "| first delta p50 (ms) | p99 | CPU | RSS |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join([*header, *lines, "", *(f"- {m}" for m in missing)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
