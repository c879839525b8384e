"""Where a turn's first delta waits: a timeline of one server process's one-call turns.

    .venv/bin/python bench/_first_delta_timeline.py [REF] [--turns 200] [--span MODULE:ATTR ...]

REF: a commit (installed by bench/_baseline.py) or nothing for this tree. Not a benchmark (its
name starts with `_`); what it found is in docs/benchmarks-server.md, "Issue 28, fifth pass".

The server runs with `time.perf_counter` wrapped around a list of functions (sync or async;
the default list names this tree's path from the HTTP request to the upstream's POST and the
first frame after its answer). Each turn's clock starts at the HTTP request's arrival (the
RSGI callback); printed per span, the median over the turns of where it starts and how long
it takes, and where the first three frames after the upstream's answer head go out, each
with its most common first bytes (the first should be the text delta). The turns run as the
guard's do, each followed by the same turn straight upstream (node_turns adds 5 turns of its
own, timed too). Spans a
version lacks are skipped (5a0c384 has other names: pass `--span` for it). The wrappers cost
about a microsecond each, so read small spans as upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.live import brain_config  # noqa: E402

import _baseline  # noqa: E402
import server_overhead as so  # noqa: E402

ARRIVAL = "cursor_byok.transport.connect.rsgi:RsgiBridge.__rsgi__"
SEND = "cursor_byok.transport.connect.sessions:Session.send"
POST = "cursor_byok.llm.upstream:Upstream.request"

SPANS = [
    ARRIVAL,
    "cursor_byok.transport.runtime.run:Run.serve",
    "cursor_byok.transport.runtime.run:first_message",
    "cursor_byok.transport.runtime.run:person_of",
    "cursor_byok.transport.runtime.run:run_request_of",
    "cursor_byok.transport.runtime.run:Run.__init__",
    "cursor_byok.transport.runtime.run:Run._adopt",
    "cursor_byok.transport.runtime.run:save_run_request",
    "cursor_byok.transport.runtime.run:Run._begin",
    "cursor_byok.transport.runtime.run:start_of",
    "cursor_byok.transport.runtime.run:transition",
    "cursor_byok.transport.runtime.commits:Commits.prepare",
    "cursor_byok.transport.runtime.commits:Commits.commit",
    "cursor_byok.transport.runtime.commands:Commands.execute",
    POST,
    SEND,
]

# Run inside the server's interpreter: wrap the spans, dump on SIGUSR2, then the CLI.
# argv: [spans joined by \n, dump path, CLI args...].
WRAPPER = r"""
import functools, importlib, inspect, json, signal, sys, time
spans, dump_path = sys.argv[1].split("\n"), sys.argv[2]
del sys.argv[1:3]
clock = time.perf_counter
events = []
record = events.append
def wrap(name, fn):
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def timed(*a, **k):
            t0 = clock()
            try:
                return await fn(*a, **k)
            finally:
                record((name, t0, clock(), ""))
    else:
        @functools.wraps(fn)
        def timed(*a, **k):
            t0 = clock()
            try:
                return fn(*a, **k)
            finally:
                record((name, t0, clock(), a[-1][:64].hex() if a and type(a[-1]) is bytes else ""))
    return timed
for span in spans:
    module_name, attr = span.split(":")
    try:
        owner = importlib.import_module(module_name)
        *path, last = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, last, wrap(span, getattr(owner, last)))
    except (ImportError, AttributeError):
        print(f"timeline: no {span} here", file=sys.stderr)
def dump(*_):
    with open(dump_path, "w") as f:
        json.dump(events, f)
signal.signal(signal.SIGUSR1, lambda *_: events.clear())
signal.signal(signal.SIGUSR2, dump)
from cursor_byok.cli import main
sys.exit(main(sys.argv[1:]))
"""


def python_of(ref: str | None) -> Path:
    if ref is None:
        venv = REPO / ".venv" / "bin" / "python"
        return venv if venv.exists() else Path(sys.executable)
    return _baseline.prepare(ref).python


def collect(python: Path, spans: list[str], turns: int) -> list[tuple[str, float, float, str]]:
    with (
        so.upstream_process() as (upstream_url, _),
        tempfile.TemporaryDirectory(dir="/dev/shm") as tmp,
    ):
        work = Path(tmp)
        config = work / "cursor-byok.toml"
        config.write_text(brain_config(upstream_url, db=work / "db"))
        out = work / "events.json"
        command = [str(python), "-c", WRAPPER, "\n".join(spans), str(out)]
        command += ["serve", "--config", str(config)]
        with so.launched_process(command, work, "server") as (port, pid):
            so.node_turns(port, None, 15)  # 20 warm-up turns
            os.kill(pid, signal.SIGUSR1)
            time.sleep(0.2)
            # As the guard runs them: each turn followed by the same turn straight upstream.
            so.node_turns(port, upstream_url, turns)
            os.kill(pid, signal.SIGUSR2)
            for _ in range(100):
                if out.exists() and out.stat().st_size:
                    break
                time.sleep(0.1)
            time.sleep(0.3)
            return [tuple(e) for e in json.loads(out.read_text())]  # type: ignore[misc]


def timeline(
    events: list[tuple[str, float, float, str]],
    arrival: str = ARRIVAL,
    send: str = SEND,
    post: str = POST,
) -> None:
    events.sort(key=lambda e: e[1])
    arrivals = [e for e in events if e[0] == arrival]
    starts: dict[str, list[float]] = {}
    lengths: dict[str, list[float]] = {}
    after_head: list[list[float]] = [[], [], []]  # the first three frames after the head
    kinds: list[dict[str, int]] = [{}, {}, {}]  # their first bytes, counted
    before_head: list[int] = []
    for i, (_, t0, _, _) in enumerate(arrivals):
        t_next = arrivals[i + 1][1] if i + 1 < len(arrivals) else float("inf")
        seen: set[str] = set()
        head = None
        frames, early = 0, 0
        for name, s, e, data in events:
            if s < t0 or s >= t_next or name in seen or name == arrival:
                continue
            if name == send:
                if head is None or s < head:
                    early += 1
                elif frames < len(after_head):
                    after_head[frames].append((s - t0) * 1e6)
                    kinds[frames][data[:24]] = kinds[frames].get(data[:24], 0) + 1
                    frames += 1
                continue
            seen.add(name)
            starts.setdefault(name, []).append((s - t0) * 1e6)
            lengths.setdefault(name, []).append((e - s) * 1e6)
            if name == post:
                head = e
        before_head.append(early)
    print(f"{len(arrivals)} turns; µs from the HTTP request's arrival, medians")
    print("| span | starts at | lasts |")
    print("|---|---:|---:|")
    for name in sorted(starts, key=lambda n: statistics.median(starts[n])):
        short = name.split(":")[1]
        print(
            f"| {short} | {statistics.median(starts[name]):.0f} "
            f"| {statistics.median(lengths[name]):.0f} |"
        )
    for k, offsets in enumerate(after_head):
        if offsets:
            common = max(kinds[k], key=kinds[k].__getitem__)
            print(
                f"| frame {k + 1} after the answer head (mostly {common}…) "
                f"| {statistics.median(offsets):.0f} | |"
            )
    if before_head:
        print(f"frames before the answer head, median: {statistics.median(before_head):.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", nargs="?", default=None)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--span", action="append", default=[])
    parser.add_argument("--arrival", default=ARRIVAL, help="the span a turn's clock starts at")
    parser.add_argument("--post", default=POST, help="the span that sends the upstream request")
    parser.add_argument("--send", default=SEND, help="the span that sends a frame to the client")
    args = parser.parse_args(argv)
    spans = [args.arrival, *args.span, args.post, args.send] if args.span else SPANS
    events = collect(python_of(args.ref), spans, args.turns)
    timeline(events, args.arrival, args.send, args.post)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
