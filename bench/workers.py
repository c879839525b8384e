"""`server.workers`: one port served by 1 or 2 worker processes, on SQLite and PostgreSQL.

    .venv/bin/python bench/workers.py [--workers 1 2] [--backends sqlite postgresql]
        [--burst 600] [--runs 2000] [--slow 3] [--connections 10]

For each backend and worker count, a server of this tree (workers.py's supervisor, started
directly so that SQLite can run two workers for the measurement; `cursor-byok serve` refuses
that) on a database in /dev/shm (PostgreSQL: a throwaway cluster, fsync off), the scripted
upstream in its own process and the Node client (bench/node_relay_client.mjs, 10 HTTP/2
connections, which the kernel spreads over the workers):

  burst   `--burst` one-call turns at once, unpaced: the turns per second the server sustains
          (wall time of the whole burst) and its CPU per turn (all workers together)
  paced   `--runs` runs at once, each answer paced over `--slow` s: the p99 gap between a
          run's text deltas against the pacing, time to first delta, CPU, and each worker's
          RSS (before / peak, MiB)

Prints a markdown section on stdout (with the load average at start and end), progress on
stderr. Stops by itself (a hard alarm at 900 s).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.live import brain_config, free_port, probe_health_blocking  # noqa: E402

import relay_concurrency as rc  # noqa: E402
import server_overhead as so  # noqa: E402

HARD_LIMIT_S = 900

_SERVE = """
import sys
from cursor_byok.config import load_config
from cursor_byok.workers import Supervisor, WorkerSpec
config = load_config(sys.argv[1])
spec = WorkerSpec(config, "127.0.0.1", int(sys.argv[2]), None, "WARNING", int(sys.argv[3]))
raise SystemExit(Supervisor(spec).run())
"""


@dataclass
class Served:
    port: int
    supervisor: int

    def workers(self) -> list[int]:
        try:
            text = Path(f"/proc/{self.supervisor}/task/{self.supervisor}/children").read_text()
        except OSError:
            return []
        # the spawn context's resource tracker is a child too: keep the servers (they listen)
        return [int(p) for p in text.split() if _is_worker(int(p))]

    def cpu(self) -> float:
        return sum(so.cpu_seconds(p) for p in self.workers())


def _is_worker(pid: int) -> bool:
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@contextlib.contextmanager
def served(upstream_url: str, database: str, workers: int) -> Iterator[Served]:
    work = Path(tempfile.mkdtemp(prefix="workers-bench-", dir="/dev/shm"))
    config = work / "cursor-byok.toml"
    config.write_text(brain_config(upstream_url, db=database, extra=f"workers = {workers}"))
    port = free_port()
    log = open(work / "server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(config), str(port), str(workers)],
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        t0 = time.monotonic()
        server = Served(port, proc.pid)
        while not probe_health_blocking("127.0.0.1", port) or len(server.workers()) < workers:
            if proc.poll() is not None or time.monotonic() - t0 > 60:
                raise RuntimeError((work / "server.log").read_text()[-3000:])
            time.sleep(0.1)
        time.sleep(1.0)  # every worker listening, not only the first
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        subprocess.run(["rm", "-rf", str(work)], check=False)


@dataclass
class Measured:
    figures: rc.Figures
    rss: dict[int, tuple[float, float]]  # worker pid -> (before, peak)


def measure(server: Served, n: int, connections: int, slow: float) -> Measured:
    pids = server.workers()
    peaks = {p: [so.rss_mib(p)] for p in pids}
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(0.1):
            for p in pids:
                with contextlib.suppress(OSError, ValueError):
                    peaks[p].append(so.rss_mib(p))

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    cpu0 = server.cpu()
    try:
        figures = rc.node_concurrent(server.port, n, connections, slow)
        figures.cpu = server.cpu() - cpu0
    finally:
        stop.set()
        thread.join()
    return Measured(figures, {p: (v[0], max(v)) for p, v in peaks.items()})


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def burst_row(backend: str, workers: int, m: Measured, n: int) -> str:
    f = m.figures
    ok = [r for r in f.runs if r.ok]
    firsts = [r.first for r in ok]
    return (
        f"| {backend} | {workers} | {len(ok)} / {n} | {f.wall:.2f} s | {len(ok) / f.wall:.0f} "
        f"| {rc.pct(firsts, 50):.0f} | {rc.pct(firsts, 99):.0f} "
        f"| {f.cpu / n * 1000:.2f} ms | {f.cpu / f.wall * 100:.0f} % |"
    )


def paced_row(backend: str, workers: int, m: Measured, n: int, paced: float) -> str:
    f = m.figures
    ok = [r for r in f.runs if r.ok]
    gaps = [g for r in ok for g in r.gaps]
    p99 = rc.pct(gaps, 99)
    rss = ", ".join(f"{b:.0f} / {p:.0f}" for b, p in m.rss.values())
    return (
        f"| {backend} | {workers} | {len(ok)} / {n} | {f.wall:.2f} s | {rc.pct(gaps, 50):.0f} "
        f"| {p99:.0f} | {p99 / paced:.2f}x | {rc.pct([r.first for r in ok], 50):.0f} "
        f"| {rc.pct([r.first for r in ok], 99):.0f} "
        f"| {f.cpu / f.wall * 100:.0f} % / {f.cpu / n * 1000:.2f} ms | {rss} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--burst", type=int, default=600)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--slow", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=10)
    args = parser.parse_args(argv)
    if not so.node_available():
        print("bench/workers.py needs node", file=sys.stderr)
        return 2

    def give_up(signum: int, frame: object) -> None:
        raise TimeoutError(f"benchmark still running after {HARD_LIMIT_S} s; stopped")

    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(HARD_LIMIT_S)
    start_load = load()
    bursts: list[str] = []
    paced_rows: list[str] = []
    paced = rc.pacing_ms(args.runs, args.slow)
    with contextlib.ExitStack() as stack:
        upstream_url, _ = stack.enter_context(so.upstream_process())
        cluster = None
        if "postgresql" in args.backends:
            from tests.support import postgres

            cluster = stack.enter_context(postgres.cluster())
        for backend in args.backends:
            for workers in args.workers:
                if backend == "sqlite":
                    database = tempfile.mktemp(prefix="workers-", suffix=".db", dir="/dev/shm")
                else:
                    assert cluster is not None
                    database = cluster.create_database(f"workers_{backend}_{workers}_{os.getpid()}")
                with served(upstream_url, database, workers) as server:
                    rc.node_concurrent(server.port, 50, args.connections, 0)  # warm up
                    m = measure(server, args.burst, args.connections, 0)
                    bursts.append(burst_row(backend, workers, m, args.burst))
                    print(bursts[-1], f"(load {load()})", file=sys.stderr)
                    m = measure(server, args.runs, args.connections, args.slow)
                    paced_rows.append(paced_row(backend, workers, m, args.runs, paced))
                    print(paced_rows[-1], f"(load {load()})", file=sys.stderr)
                if backend == "sqlite":
                    for suffix in ("", "-wal", "-shm"):
                        with contextlib.suppress(OSError):
                            os.unlink(database + suffix)
    out = [
        "## Workers: one port, 1 or 2 processes (bench/workers.py)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load "
        f"average {start_load} at the start and {load()} at the end (1, 5, 15 min). Node "
        f"client, {args.connections} HTTP/2 connections spread by the kernel over the workers; "
        "databases in /dev/shm (PostgreSQL: a local cluster, fsync off).",
        "",
        f"**Burst**: {args.burst} one-call turns at once, unpaced. CPU: every worker's utime + "
        "stime, per turn and as % of one core over the wall time.",
        "",
        "| database | workers | completed | wall | turns/s | first delta p50 (ms) | p99 "
        "| CPU per turn | CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *bursts,
        "",
        f"**Paced**: {args.runs} runs at once, each answer paced over {args.slow:g} s (one chunk "
        f"every {paced:.0f} ms). Gaps: ms between a run's text deltas; the ratio is p99 / "
        "pacing. RSS: each worker's before / peak, MiB.",
        "",
        "| database | workers | completed | wall | gap p50 | gap p99 | p99 / pacing "
        "| first delta p50 (ms) | p99 | CPU / per run | RSS per worker |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *paced_rows,
        "",
    ]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
