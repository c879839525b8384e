"""Our server's per-turn overhead against the floor: the thinnest relay on the same stack.

    .venv/bin/python bench/relay_overhead.py [--rounds 10] [--turns 100] [--db DIR]
                                             [--base REF | --no-base]

Servers at once against one scripted upstream (tests/support/brain.py, its own process):

- `relay`: bench/floor_relay.py, what any relay must do for one text turn (granian RSGI,
  Connect framing, one upstream request over a kept-alive connection, SSE to text deltas);
- `server (this tree)`: `python -m cursor_byok serve` of this working tree;
- `server (REF)` with `--base REF`: the server of that commit, from a temporary worktree.

The Node client (bench/node_client.mjs) runs `--turns` turns (after 5 warm-up turns) against
each server in turn, `--rounds` times, the order reversed every round; every turn is paired
with one straight to the upstream. Per round and server: the median overhead over direct of
the first text delta and of the whole turn (to the end of the stream), and the server
process's CPU time (utime + stime of /proc/PID/stat, around that server's batch only,
warm-up turns included) per turn. The table gives the median over the rounds; "over relay" is
the median of the rounds' differences to the relay's figure of the same round. Before timing,
a few turns with text check that every server answers what the upstream answers directly.

The databases go to tmpfs (/dev/shm) by default. Stops by itself (a hard alarm at 450 s).
Prints a markdown section on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import _relay  # noqa: E402
import server_overhead as so  # noqa: E402

HARD_LIMIT_S = 450
WARMUP = 5  # node_turns' warm-up turns, counted in the CPU per turn
# Targets against the relay: ms over it (first delta, whole turn), and a CPU ratio.
TARGET_FIRST_MS = 0.5
TARGET_WHOLE_MS = 1.0
TARGET_CPU = 3.0
STRETCH_CPU = 2.0
KEYS = ("ttft", "total", "cpu")


def measure(
    servers: list[_relay.Launched], upstream_url: str, rounds: int, turns: int
) -> dict[str, dict[str, list[float]]]:
    """Per server, per key in KEYS, one value per round (ms)."""
    out = {s.name: {key: [] for key in KEYS} for s in servers}
    for r in range(rounds):
        for s in servers if r % 2 == 0 else reversed(servers):
            cpu0 = so.cpu_seconds(s.pid)
            via, direct = so.node_turns(s.port, upstream_url, turns)
            cpu = so.cpu_seconds(s.pid) - cpu0
            for key in ("ttft", "total"):
                over = statistics.median(getattr(t, key) for t in via) - statistics.median(
                    getattr(t, key) for t in direct
                )
                out[s.name][key].append(over * 1000)
            out[s.name]["cpu"].append(cpu / (turns + WARMUP) * 1000)
        relay = out[_relay.RELAY]
        print(
            f"round {r + 1}/{rounds}: relay first {relay['ttft'][-1]:+.2f} ms, "
            + ", ".join(
                f"{name} first {v['ttft'][-1]:+.2f} whole {v['total'][-1]:+.2f} "
                f"cpu {v['cpu'][-1]:.2f}"
                for name, v in out.items()
                if name != _relay.RELAY
            ),
            file=sys.stderr,
        )
    return out


def report(
    results: dict[str, dict[str, list[float]]], rounds: int, turns: int, db: Path
) -> list[str]:
    relay = results[_relay.RELAY]

    def med(values: list[float]) -> float:
        return statistics.median(values)

    def over_relay(name: str, key: str) -> float:
        return med([a - b for a, b in zip(results[name][key], relay[key], strict=True)])

    def cpu_ratio(name: str) -> float:
        return med([a / b for a, b in zip(results[name]["cpu"], relay["cpu"], strict=True) if b])

    lines = [
        "## Per-turn overhead against the floor relay",
        "",
        f"{rounds} rounds of {turns} turns (+{WARMUP} warm-up) per server, Node client, order "
        f"reversed every round, DB in {db}. Overheads in ms over the same turn straight to the "
        'upstream, median of the rounds\' medians; "over relay" and the CPU ratio: median of '
        "the rounds' differences (ratios) to the relay of the same round. CPU: the server "
        "process's utime + stime per turn (warm-up turns included).",
        "",
        "| server | first delta over direct | over relay | whole turn over direct | over relay "
        "| CPU per turn | CPU / relay | meets targets |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, values in results.items():
        if name == _relay.RELAY:
            cells = [f"{med(values['ttft']):+.2f}", "", f"{med(values['total']):+.2f}", ""]
            cells += [f"{med(values['cpu']):.2f} ms", "1.00x", "(the floor)"]
        else:
            first, whole = over_relay(name, "ttft"), over_relay(name, "total")
            ratio = cpu_ratio(name)
            verdict = [
                f"first {'yes' if first <= TARGET_FIRST_MS else 'no'}",
                f"whole {'yes' if whole <= TARGET_WHOLE_MS else 'no'}",
                "CPU "
                + (
                    "yes (stretch too)"
                    if ratio <= STRETCH_CPU
                    else "yes"
                    if ratio <= TARGET_CPU
                    else "no"
                ),
            ]
            cells = [f"{med(values['ttft']):+.2f}", f"{first:+.2f}"]
            cells += [f"{med(values['total']):+.2f}", f"{whole:+.2f}"]
            cells += [f"{med(values['cpu']):.2f} ms", f"{ratio:.2f}x", ", ".join(verdict)]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    lines += [
        "",
        f"Targets: first delta ≤ relay + {TARGET_FIRST_MS} ms, whole turn ≤ relay + "
        f"{TARGET_WHOLE_MS} ms, CPU per turn ≤ {TARGET_CPU:g}x the relay's (stretch "
        f"{STRETCH_CPU:g}x).",
        "",
        "Every round (first delta / whole turn over direct, ms; CPU per turn, ms):",
        "",
    ]
    for name, values in results.items():
        each = " ".join(
            f"{a:+.2f}/{b:+.2f}/{c:.1f}"
            for a, b, c in zip(values["ttft"], values["total"], values["cpu"], strict=True)
        )
        lines.append(f"- {name}: {each}")
    lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--db", type=Path, default=Path("/dev/shm"), help="where the databases go")
    parser.add_argument("--base", default=None, help="also measure the server of this commit")
    parser.add_argument("--no-base", action="store_true", help="ignore --base")
    args = parser.parse_args(argv)
    if not so.node_available():
        print("bench/relay_overhead.py needs node (bench/node_client.mjs)", file=sys.stderr)
        return 2
    base = None if args.no_base else args.base

    def give_up(signum: int, frame: object) -> None:
        raise TimeoutError(f"benchmark still running after {HARD_LIMIT_S} s; stopped")

    signal.signal(signal.SIGALRM, give_up)  # an exception, so the child processes are stopped
    signal.alarm(HARD_LIMIT_S)
    with contextlib.ExitStack() as stack:
        upstream_url, _ = stack.enter_context(so.upstream_process())
        servers, missing = _relay.start_all(stack, upstream_url, args.db, base)
        for s in servers:
            problem = _relay.check_same_text(s.port, upstream_url)
            if problem:
                raise RuntimeError(f"{s.name} does not answer like the upstream: {problem}")
        print(f"same text as direct: {', '.join(s.name for s in servers)}", file=sys.stderr)
        results = measure(servers, upstream_url, args.rounds, args.turns)
    lines = report(results, args.rounds, args.turns, args.db)
    print("\n".join([*lines, *(f"- {m}" for m in missing), ""] if missing else lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
