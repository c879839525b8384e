"""A soak: continuous turns through one server process for minutes, its RSS over time.

    .venv/bin/python bench/soak.py [--seconds 600] [--workers 8] [--backend sqlite|postgresql|both]
                                   [--trace] [--cache-mib N]

The scripted upstream (tests/support/brain.py) in a child process, our server in another
(`cursor-byok serve`, SQLite in a temporary folder or a throwaway PostgreSQL cluster), and
`--workers` clients here, each sending one turn after another on HTTP/2 `Run`, every turn a
new conversation (so every cache keeps filling). Every 10 s: the server's RSS and its cache
gauges (`cursor_byok_server_cache_bytes`) from /metrics.

Reported per backend: turns, failures, RSS at start, when every cache that fills reached its
cap (>= 95 % of it), and at the end; and the RSS slope (least squares) over the last 5
minutes, the figure docs/benchmarks-server.md keeps: once the caches are full it must be
<= 0.5 MB/min (a slope that small over 5 minutes is the allocator's noise; a leak of one
retained object per turn at the turn rates here is several MB/min).

`--trace` runs the server under bench/_traced_serve.py (tracemalloc) and prints the 15
allocation sites that grew most between the moment the caches were full and the end;
`--cache-mib N` makes the caches N MiB, so they are full within seconds (for finding a creep,
not for the figure).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx  # noqa: E402
from tests.support import connect_client as cc  # noqa: E402
from tests.support.live import brain_config  # noqa: E402

from cursor_byok.transport.runtime import (  # noqa: E402
    client_blobs,
    committed_states,
    request_bases,
)
from server_overhead import rss_mib, server_turn, upstream_process  # noqa: E402

SAMPLE_S = 10.0
SLOPE_WINDOW_S = 300.0
LIMIT_MB_PER_MIN = 0.5
CAPS = {
    "committed_states": committed_states.MAX_BYTES,
    "request_bases": request_bases.MAX_BYTES,
    "client_blobs": client_blobs.MAX_BYTES,
}
# The caches a soak of new conversations fills: a request base (kilobytes) and a committed state
# (about 3 KB as counted) per turn. The client blobs stay empty (this client sends none).
FILLS = ("request_bases", "committed_states")
_GAUGE = re.compile(r'^cursor_byok_server_cache_bytes\{cache="(\w+)"\} (\S+)$', re.M)


def slope_mb_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) points, in MB (MiB) per minute."""
    n = len(points)
    if n < 2:
        return float("nan")
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    cov = sum((t - mx) * (v - my) for t, v in points)
    return cov / var * 60 if var else float("nan")


@contextlib.contextmanager
def launched_process(cmd: list[str], work: Path, env: dict[str, str]) -> Iterator[tuple[int, int]]:
    """The server on a free port, healthy when entered ((port, pid)); its log in `work`.
    Two minutes to start: under tracemalloc on a loaded machine it takes tens of seconds."""
    import subprocess

    from tests.support.live import free_port, probe_health_blocking

    port = free_port()
    with open(work / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [*cmd, "--port", str(port)], cwd=work, env=env, stdout=log, stderr=log
        )
    try:
        t0 = time.monotonic()
        while not probe_health_blocking("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() - t0 > 120:
                raise RuntimeError("the server did not start: " + (work / "server.log").read_text())
            time.sleep(0.2)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


@contextlib.contextmanager
def database(backend: str, work: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield str(work / "soak.db")
        return
    from tests.support.postgres import cluster

    with cluster() as c:
        yield c.create_database("soak")


async def worker(port: int, stop: float, counts: dict[str, int]) -> None:
    client = await cc.H2Client.connect("127.0.0.1", port)
    try:
        while time.monotonic() < stop:
            try:
                turn = await server_turn(client, f"soak turn {os.urandom(4).hex()}")
                counts["ok" if turn.ok else "failed"] += 1
            except Exception:
                counts["failed"] += 1
                await client.close()
                client = await cc.H2Client.connect("127.0.0.1", port)
    finally:
        await client.close()


async def soak(
    backend: str, seconds: float, workers: int, trace: bool, cache_mib: int | None
) -> list[str]:
    caps = dict.fromkeys(CAPS, cache_mib << 20) if cache_mib else dict(CAPS)
    with (
        tempfile.TemporaryDirectory() as tmp,
        upstream_process() as (upstream_url, _),
        database(backend, Path(tmp)) as db,
    ):
        work = Path(tmp)
        (work / "snaps").mkdir()
        config = work / "cursor-byok.toml"
        config.write_text(brain_config(upstream_url, db=db, extra='log_level = "warning"'))
        if trace or cache_mib:
            cmd = [sys.executable, str(REPO / "bench" / "_traced_serve.py")]
            cmd += ["--cache-mib", str(cache_mib)] if cache_mib else []
        else:
            cmd = [sys.executable, "-m", "cursor_byok"]
        cmd += ["serve", "--config", str(config)]
        env = {
            **os.environ,
            "SOAK_SNAPSHOT_DIR": str(work / "snaps"),
            "SOAK_TRACE": "1" if trace else "0",
        }
        with launched_process(cmd, work, env) as (port, pid):
            counts = {"ok": 0, "failed": 0}
            t0 = time.monotonic()
            tasks = [
                asyncio.create_task(worker(port, t0 + seconds, counts)) for _ in range(workers)
            ]
            samples: list[tuple[float, float, dict[str, float]]] = []
            full_at: float | None = None
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                while time.monotonic() < t0 + seconds:
                    await asyncio.sleep(SAMPLE_S)
                    metrics = (await http.get("/metrics")).text
                    caches = {name: float(v) for name, v in _GAUGE.findall(metrics)}
                    now = time.monotonic() - t0
                    samples.append((now, rss_mib(pid), caches))
                    if full_at is None and all(caches.get(n, 0) >= 0.95 * caps[n] for n in FILLS):
                        full_at = now
                        if trace:
                            os.kill(pid, signal.SIGUSR1)
                    print(
                        f"{backend} {now:5.0f} s: RSS {samples[-1][1]:6.1f} MiB, "
                        f"{counts['ok']} turns, caches "
                        + ", ".join(f"{n} {v / 2**20:.1f}" for n, v in caches.items()),
                        file=sys.stderr,
                    )
            await asyncio.gather(*tasks)
            if trace:
                os.kill(pid, signal.SIGUSR1)
                await asyncio.sleep(10)  # a snapshot of a large heap takes seconds to write
        return report(backend, seconds, workers, counts, samples, full_at, work, trace)


def report(
    backend: str,
    seconds: float,
    workers: int,
    counts: dict[str, int],
    samples: list[tuple[float, float, dict[str, float]]],
    full_at: float | None,
    work: Path,
    trace: bool,
) -> list[str]:
    end = samples[-1][0]
    window = [(t, r) for t, r, _ in samples if t >= end - SLOPE_WINDOW_S]
    after_full = [(t, r) for t, r, _ in samples if full_at is not None and t >= full_at]
    slope = slope_mb_per_min(window)
    gauges = [(t, sum(c.values()) / 2**20) for t, _, c in samples if t >= end - SLOPE_WINDOW_S]
    explained = slope_mb_per_min(gauges)
    full_rss = next((r for t, r, _ in samples if t == full_at), float("nan"))
    lines = [
        f"### {backend}: {seconds:.0f} s, {workers} clients",
        "",
        f"- turns: {counts['ok']} ({counts['ok'] / seconds:.1f}/s), failed: {counts['failed']}",
        f"- RSS: {samples[0][1]:.1f} MiB at {samples[0][0]:.0f} s, "
        + (
            f"{full_rss:.1f} MiB when the caches were full ({full_at:.0f} s), "
            if full_at is not None
            else "the caches never full, "
        )
        + f"{samples[-1][1]:.1f} MiB at the end",
        f"- RSS slope over the last {min(SLOPE_WINDOW_S, end - window[0][0]):.0f} s: "
        f"{slope:+.2f} MB/min; since the caches were full: "
        f"{slope_mb_per_min(after_full):+.2f} MB/min; of it the cache gauges' growth: "
        f"{explained:+.2f} MB/min, unexplained {slope - explained:+.2f} MB/min (limit "
        f"{LIMIT_MB_PER_MIN} MB/min once full)",
        "",
        "| s | RSS MiB | " + " | ".join(f"{n} MiB" for n in CAPS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in CAPS) + " |",
    ]
    for t, rss, caches in samples[:: max(1, len(samples) // 20)]:
        cells = " | ".join(f"{caches.get(n, 0) / 2**20:.1f}" for n in CAPS)
        lines.append(f"| {t:.0f} | {rss:.1f} | {cells} |")
    if trace:
        lines += ["", *grown(work / "snaps")]
    return lines


def grown(folder: Path) -> list[str]:
    import tracemalloc

    snaps = sorted(folder.glob("*.snap"), key=lambda p: int(p.stem))
    if len(snaps) < 2:
        return ["(fewer than two snapshots)"]
    first = tracemalloc.Snapshot.load(str(snaps[0]))
    last = tracemalloc.Snapshot.load(str(snaps[-1]))
    total = sum(s.size for s in last.statistics("filename")) - sum(
        s.size for s in first.statistics("filename")
    )
    out = [
        f"Traced Python memory grew {total / 2**20:+.1f} MiB between the caches full and the "
        "end; the sites that grew most (tracemalloc):",
        "",
        "```",
    ]
    for stat in last.compare_to(first, "traceback")[:15]:
        out.append(f"{stat.size_diff / 1024:+9.0f} KiB {stat.count_diff:+7d} blocks")
        out += [f"    {line}" for line in stat.traceback.format()[-8:]]
    out.append("```")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--cache-mib", type=int, default=None)
    args = parser.parse_args(argv)
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    out = ["## Soak: RSS over time", ""]
    for backend in backends:
        out += asyncio.run(soak(backend, args.seconds, args.workers, args.trace, args.cache_mib))
        out.append("")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
