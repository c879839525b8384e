"""What our server adds on top of the model: prints a markdown report (docs/benchmarks-server.md).

    .venv/bin/python bench/server_overhead.py [--turns 60] [--concurrent 500] [--connections 10]

One run, three real processes on loopback: the scripted OpenAI-compatible upstream
(tests/support/brain.py, in a child process), our server (`python -m cursor_byok serve`, a
child process with its SQLite database in a temporary directory) and this client.

  overhead     time to first text delta and total turn time, sequential turns, through the
               server (HTTP/2 `Run`, our h2 client) vs the same upstream consumed directly by a
               plain httpx streaming client; medians and the difference. Also the transport
               floor: the same client against a server whose run handler echoes at once (no
               store, no model): what HTTP/2, granian and the client cost by themselves. Then
               the same with bench/node_client.mjs (Node's http2 and http on both paths) when
               `node` is installed: the fairer measure, since httpx costs more per request
               than our h2 client and so hides part of the server's overhead
  throughput   text deltas per second through one server process (one long streamed answer)
  concurrency  N concurrent streaming runs over a few HTTP/2 connections: server CPU % (of one
               core, from /proc/PID/stat), server RSS (/proc/PID/status), and the delay between
               consecutive events of a run at the client (p50 / p99 / max)

It stops by itself (a hard alarm at 170 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from tests.support import connect_client as cc  # noqa: E402
from tests.support.live import ServerProcess, brain_config, server_process  # noqa: E402

from cursor_byok.launch import (  # noqa: E402
    server_process as transport_server_process,
)
from cursor_byok.transport.cursor.proto import agent_pb2  # noqa: E402

HARD_LIMIT_S = 170
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- the upstream in its own process --------------------------------------------------------


def serve_upstream() -> None:
    """Child mode: the brain upstream on a free port; prints the port; runs until killed."""
    from tests.support.brain import answer
    from tests.support.upstream import FakeUpstream

    async def main() -> None:
        upstream = FakeUpstream(answer)
        # FakeUpstream.start() listens with asyncio's default backlog (100): 500 simultaneous
        # connects would overflow it and wait for SYN retransmits (1 s, 3 s, ...), which is a
        # property of the fake, not of our server. Listen with a deep backlog instead.
        server = await asyncio.start_server(upstream._handle, "127.0.0.1", 0, backlog=4096)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# -- interleaved comparisons (bench/_ab.py, bench/_floors.py) -------------------------------


@contextlib.contextmanager
def launched(
    cmd: list[str], work: Path, what: str, env: dict[str, str] | None = None
) -> Iterator[int]:
    """A server started as `cmd --port PORT` on a free port, healthy when entered, stopped
    after; `what` names it when it does not start."""
    with launched_process(cmd, work, what, env) as (port, _):
        yield port


@contextlib.contextmanager
def launched_process(
    cmd: list[str], work: Path, what: str, env: dict[str, str] | None = None
) -> Iterator[tuple[int, int]]:
    """`launched`, yielding (port, pid): for benchmarks that read the server's CPU time."""
    from tests.support.live import free_port, probe_health_blocking

    port = free_port()
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        t0 = time.monotonic()
        while not probe_health_blocking("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() - t0 > 30:
                raise RuntimeError(f"{what} did not start")
            time.sleep(0.05)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def interleaved_overheads(
    ports: dict[str, int], upstream_url: str, rounds: int, turns: int, keys: tuple[str, ...]
) -> dict[str, dict[str, list[float]]]:
    """Per server and per Turn attribute in `keys`, each round's median overhead over direct
    (ms): the Node client runs `turns` turns against each server in turn, the order reversed
    every round, so the drift of a shared machine hits all alike."""
    out: dict[str, dict[str, list[float]]] = {name: {key: [] for key in keys} for name in ports}
    names = list(ports)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            via, direct = node_turns(ports[name], upstream_url, turns)
            for key in keys:
                over = statistics.median(getattr(t, key) for t in via) - statistics.median(
                    getattr(t, key) for t in direct
                )
                out[name][key].append(over * 1000)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    return out


# -- /proc ------------------------------------------------------------------------------------


@contextlib.contextmanager
def upstream_process() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The scripted upstream in a child process: (its base URL, the process); stopped after."""
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve-upstream"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert child.stdout is not None
        yield f"http://127.0.0.1:{int(child.stdout.readline())}", child
    finally:
        child.terminate()
        child.wait(10)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# -- one turn, each way ---------------------------------------------------------------------


def run_request(text: str) -> agent_pb2.AgentClientMessage:
    req = agent_pb2.AgentRunRequest(conversation_id=f"bench-{os.urandom(8).hex()}")
    req.requested_model.model_id = "brain-1"
    uma = req.action.user_message_action
    uma.user_message.text = text
    uma.request_context.env.os_version = "linux bench"
    uma.request_context.env.workspace_paths.append("/tmp/bench")
    return agent_pb2.AgentClientMessage(run_request=req)


@dataclass
class Turn:
    ttft: float
    total: float  # to the end of the stream
    deltas: int
    text_times: list[float] = field(default_factory=list)
    ok: bool = True
    ended: float = float("nan")  # to turn_ended (direct: the end of the stream)


async def server_turn(client: cc.H2Client, prompt: str) -> Turn:
    stream = await client.open_run()
    t0 = time.perf_counter()
    await stream.send(run_request(prompt))
    times: list[float] = []
    ended = float("nan")
    ok = False
    while True:
        frame = await stream.next_frame(60)
        now = time.perf_counter()
        if frame is None:
            break
        if frame.flags & 0x02:
            ok = json.loads(frame.payload or b"{}") == {}
            break
        msg = stream.result.messages[-1]
        kind = msg.interaction_update.WhichOneof("message")
        if kind == "text_delta":
            times.append(now)
        elif kind == "turn_ended":
            ended = now - t0
        elif msg.HasField("kv_server_message"):  # a client keeps blobs: acknowledge them
            reply = agent_pb2.AgentClientMessage()
            reply.kv_client_message.id = msg.kv_server_message.id
            if msg.kv_server_message.HasField("set_blob_args"):
                reply.kv_client_message.set_blob_result.SetInParent()
            else:
                reply.kv_client_message.get_blob_result.SetInParent()
            await stream.send(reply)
    end = time.perf_counter()
    client.streams.pop(stream.stream_id, None)
    ttft = (times[0] - t0) if times else float("nan")
    return Turn(ttft, end - t0, len(times), times, ok and bool(times), ended)


async def direct_turn(client: httpx.AsyncClient, base: str, prompt: str) -> Turn:
    body = {
        "model": "brain-1",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": prompt},
        ],
    }
    t0 = time.perf_counter()
    times: list[float] = []
    async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    times.append(time.perf_counter())
    end = time.perf_counter()
    ttft = (times[0] - t0) if times else float("nan")
    return Turn(ttft, end - t0, len(times), times, bool(times), end - t0)


# -- scenarios ------------------------------------------------------------------------------


async def overhead_turns(
    srv: ServerProcess, upstream_url: str, turns: int
) -> tuple[list[Turn], list[Turn], float]:
    h2 = await cc.H2Client.connect("127.0.0.1", srv.port)
    direct = httpx.AsyncClient(timeout=30)
    via: list[Turn] = []
    plain: list[Turn] = []
    try:
        for i in range(5):  # warm-up: connections, imports, caches
            await server_turn(h2, f"warm up {i}")
            await direct_turn(direct, upstream_url, f"warm up {i}")
        cpu = 0.0
        for i in range(turns):  # interleaved, so drift hits both paths alike
            prompt = f"hello number {i}, how are you"
            cpu0 = cpu_seconds(srv.proc.pid)
            via.append(await server_turn(h2, prompt))
            cpu += cpu_seconds(srv.proc.pid) - cpu0
            plain.append(await direct_turn(direct, upstream_url, prompt))
    finally:
        await h2.close()
        await direct.aclose()
    assert all(t.ok for t in via) and all(t.ok for t in plain), "a turn failed"
    return via, plain, cpu / turns


async def floor_turns(port: int, turns: int) -> list[float]:
    """First-delta times against the echo handler (transport only)."""
    h2 = await cc.H2Client.connect("127.0.0.1", port)
    try:
        for i in range(5):
            await server_turn(h2, f"warm up {i}")
        return [(await server_turn(h2, f"hello number {i}")).ttft for i in range(turns)]
    finally:
        await h2.close()


def overhead_rows(label: str, via: list[Turn], plain: list[Turn], cpu: float) -> list[str]:
    rows = []
    for metric, key in (
        ("first text delta", "ttft"),
        ("turn ended", "ended"),
        ("whole turn", "total"),
    ):
        s = statistics.median(getattr(t, key) for t in via) * 1000
        d = statistics.median(getattr(t, key) for t in plain) * 1000
        s99 = pct([getattr(t, key) for t in via], 99) * 1000
        d99 = pct([getattr(t, key) for t in plain], 99) * 1000
        rows.append(
            f"| {metric}, {label} | {d:.2f} | {s:.2f} | {s - d:+.2f} | {s / d:.2f}x "
            f"| {d99:.2f} | {s99:.2f} |"
        )
    rows.append(f"| server CPU per turn, {label} | | {cpu * 1000:.1f} | | | | |")
    return rows


NODE_CLIENT = Path(__file__).with_name("node_client.mjs")


def node_turns(port: int, upstream_url: str | None, turns: int) -> tuple[list[Turn], list[Turn]]:
    """`turns` interleaved turns by bench/node_client.mjs (after 5 warm-up turns)."""
    prompts = [f"hello number {i}, how are you" for i in range(turns + 5)]
    requests = []
    for prompt in prompts:
        payload = run_request(prompt).SerializeToString()
        requests.append((b"\0" + len(payload).to_bytes(4, "big") + payload).hex())
    plan = {"port": port, "upstream": upstream_url, "warmup": 5}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump({**plan, "prompts": prompts, "requests": requests}, f)
        f.flush()
        done = subprocess.run(
            ["node", str(NODE_CLIENT), f.name], capture_output=True, text=True, timeout=120
        )
    if done.returncode != 0:
        raise RuntimeError(f"node client failed: {done.stderr.strip()[-2000:]}")
    out = json.loads(done.stdout)

    def turn(t: dict[str, float]) -> Turn:
        ended = t["ended"] if t["ended"] is not None else float("nan")
        return Turn(
            t["first"] / 1000, t["total"] / 1000, int(t["deltas"]), [], bool(t["ok"]), ended / 1000
        )

    via = [turn(t) for t in out["via"]]
    direct = [turn(t) for t in out["direct"]]
    assert via and all(t.ok for t in via + direct), "a turn failed (node client)"
    return via, direct


def node_available() -> bool:
    try:
        return subprocess.run(["node", "--version"], capture_output=True).returncode == 0
    except OSError:
        return False


async def overhead(
    servers: list[tuple[str, ServerProcess]], upstream_url: str, turns: int, echo_port: int
) -> list[str]:
    rows: list[str] = []
    for label, srv in servers:
        via, plain, cpu = await overhead_turns(srv, upstream_url, turns)
        rows += overhead_rows(label, via, plain, cpu)
    floor = await floor_turns(echo_port, turns)
    rows.append(
        f"| first text delta, transport floor (echo handler: no store, no model) | | "
        f"{statistics.median(floor) * 1000:.2f} | | | | {pct(floor, 99) * 1000:.2f} |"
    )
    node_rows: list[str] = []
    if node_available():
        for label, srv in servers:
            cpu0 = cpu_seconds(srv.proc.pid)
            via, plain = await asyncio.to_thread(node_turns, srv.port, upstream_url, turns)
            cpu = (cpu_seconds(srv.proc.pid) - cpu0) / (turns + 5)
            node_rows += overhead_rows(label, via, plain, cpu)
        echo_via, _ = await asyncio.to_thread(node_turns, echo_port, None, turns)
        floor = [t.ttft for t in echo_via]
        node_rows.append(
            f"| first text delta, transport floor (echo handler: no store, no model) | | "
            f"{statistics.median(floor) * 1000:.2f} | | | | {pct(floor, 99) * 1000:.2f} |"
        )
    else:
        node_rows.append("| (node is not installed: no Node client rows) | | | | | | |")
    return [
        f"## Overhead per turn ({turns} sequential turns, medians, ms)",
        "",
        "Via server: HTTP/2 `Run` (h2c), one connection, a new stream and a new conversation per "
        "turn. Direct: httpx streaming POST to the same upstream, keep-alive connection, SSE "
        "lines parsed as JSON. The server's SQLite database (synchronous=FULL) on the disk, "
        "then on tmpfs (/dev/shm) to show what the fsyncs cost. The transport floor is the "
        "same client against a server process whose run handler answers at once with no store "
        "and no model: what HTTP/2, granian and this Python h2 client cost by themselves. "
        "Turn ended: `turn_ended` reached the client (it stops showing the turn as generating; "
        "the protocol's final checkpoint and the end of the stream follow); direct: the end of "
        "the response. Whole turn: the end of the stream, both ways.",
        "",
        "| metric | direct | via server | overhead | ratio | direct p99 | via server p99 |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "The same turns with the Node client (bench/node_client.mjs): Node's HTTP/2 (nghttp2) "
        "through the server and Node's HTTP/1.1 straight to the upstream. Real clients are "
        "Node (the IDE) or Bun (tests/realclient), and both paths use one runtime, so "
        "this is the fairer measure of what the server adds; the Python client above costs "
        "more per request on both paths (httpx especially), which hides part of it.",
        "",
        "| metric | direct | via server | overhead | ratio | direct p99 | via server p99 |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *node_rows,
        "",
    ]


async def throughput(srv: ServerProcess, upstream_url: str, chars: int) -> list[str]:
    prompt = "x" * chars  # the brain answers "You said: <prompt>" in 4-character deltas
    h2 = await cc.H2Client.connect("127.0.0.1", srv.port)
    direct = httpx.AsyncClient(timeout=60)
    try:
        cpu0 = cpu_seconds(srv.proc.pid)
        via = await server_turn(h2, prompt)
        cpu1 = cpu_seconds(srv.proc.pid)
        plain = await direct_turn(direct, upstream_url, prompt)
    finally:
        await h2.close()
        await direct.aclose()

    def rate(t: Turn) -> float:
        span = t.text_times[-1] - t.text_times[0]
        return (t.deltas - 1) / span if span > 0 else float("nan")

    span = via.text_times[-1] - via.text_times[0]
    return [
        "## Text deltas per second through one server process",
        "",
        f"One answer of {via.deltas} text deltas (4 characters each), first to last delta.",
        "",
        "| path | deltas | deltas/s | turn time (s) |",
        "|---|---:|---:|---:|",
        f"| direct from the upstream | {plain.deltas} | {rate(plain):,.0f} | {plain.total:.2f} |",
        f"| via server (HTTP/2 Run) | {via.deltas} | {rate(via):,.0f} | {via.total:.2f} |",
        "",
        f"Server CPU during that turn: {(cpu1 - cpu0):.2f} s for {span:.2f} s of streaming.",
        "",
    ]


def stats(results: list[Turn | BaseException]) -> dict[str, float]:
    ok = [r for r in results if isinstance(r, Turn) and r.ok]
    gaps = [b - a for t in ok for a, b in zip(t.text_times, t.text_times[1:], strict=False)]
    ttfts = [t.ttft for t in ok]
    totals = [t.total for t in ok]
    return {
        "ok": len(ok),
        "gap50": pct(gaps, 50) * 1000,
        "gap99": pct(gaps, 99) * 1000,
        "gapmax": max(gaps) * 1000,
        "ttft50": pct(ttfts, 50) * 1000,
        "ttft99": pct(ttfts, 99) * 1000,
        "total50": pct(totals, 50),
        "total99": pct(totals, 99),
    }


async def concurrency(
    srv: ServerProcess,
    upstream_url: str,
    upstream_pid: int,
    runs: int,
    connections: int,
    slow: float,
) -> list[str]:
    pid = srv.proc.pid
    clients = [await cc.H2Client.connect("127.0.0.1", srv.port) for _ in range(connections)]
    peak = [rss_mib(pid)]
    rss_before = peak[0]
    stop = asyncio.Event()

    async def sampler() -> None:
        while not stop.is_set():
            peak.append(rss_mib(pid))
            await asyncio.sleep(0.1)

    def prompt(i: int) -> str:
        return f"[slow {slow}] concurrent {i}"

    sampling = asyncio.create_task(sampler())
    cpu0, up0, t0 = cpu_seconds(pid), cpu_seconds(upstream_pid), time.perf_counter()
    try:
        via: list[Turn | BaseException] = await asyncio.gather(
            *(server_turn(clients[i % connections], prompt(i)) for i in range(runs)),
            return_exceptions=True,
        )
    finally:
        wall = time.perf_counter() - t0
        cpu1, up1 = cpu_seconds(pid), cpu_seconds(upstream_pid)
        stop.set()
        await sampling
        for client in clients:
            await client.close()
    # the same load straight to the upstream, for reference
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=60, limits=limits) as direct:
        t1 = time.perf_counter()
        plain: list[Turn | BaseException] = await asyncio.gather(
            *(direct_turn(direct, upstream_url, prompt(i)) for i in range(runs)),
            return_exceptions=True,
        )
        wall_direct = time.perf_counter() - t1
    v, d = stats(via), stats(plain)
    # the brain spreads `slow` seconds over its chunks: the pace a perfect relay would keep
    example = f"You said: {prompt(runs // 2)}"
    chunks = 1 + (len(example) + 3) // 4 + 4 + 1  # role, text, stop, usage, [DONE], pause
    paced = slow / chunks * 1000

    def row(label: str, key: str, unit: str, fmt: str = ".0f") -> str:
        return f"| {label} | {v[key]:{fmt}} {unit} | {d[key]:{fmt}} {unit} |"

    return [
        f"## {runs} concurrent streaming runs ({connections} HTTP/2 connections)",
        "",
        f"Each run asks the brain for `[slow {slow:g}]`: its answer is paced over {slow:g} s (one "
        f"upstream chunk every {paced:.0f} ms), so all runs overlap. The same {runs} requests "
        "sent straight to the upstream by one httpx client are the reference column.",
        "",
        "| metric | via server | direct |",
        "|---|---:|---:|",
        f"| runs completed | {v['ok']:.0f} / {runs} | {d['ok']:.0f} / {runs} |",
        f"| wall time | {wall:.2f} s | {wall_direct:.2f} s |",
        f"| server CPU (% of one core, mean over the wall time) | "
        f"{(cpu1 - cpu0) / wall * 100:.0f} % | |",
        f"| upstream process CPU | {(up1 - up0) / wall * 100:.0f} % | |",
        f"| server RSS before / peak | {rss_before:.0f} / {max(peak):.0f} MiB | |",
        row("delay between consecutive text deltas of a run, p50", "gap50", "ms"),
        row("... p99", "gap99", "ms"),
        row("... max", "gapmax", "ms"),
        f"| upstream pacing (a perfect relay) | {paced:.0f} ms | {paced:.0f} ms |",
        row("time to first text delta, p50", "ttft50", "ms"),
        row("... p99", "ttft99", "ms"),
        row("turn time, p50", "total50", "s", ".2f"),
        row("... p99", "total99", "s", ".2f"),
        "",
    ]


# -- main -------------------------------------------------------------------------------------


async def timed(title: str, coro: Awaitable[list[str]], out: list[str]) -> None:
    t0 = time.perf_counter()
    lines = await coro
    out.extend(lines)
    print(f"{title}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def machine() -> list[str]:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return [
        "| | |",
        "|---|---|",
        f"| date | {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} |",
        f"| cores | {os.cpu_count()} ({model}) |",
        f"| os | {platform.system()} {platform.release()} |",
        f"| python | {platform.python_implementation()} {platform.python_version()} |",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--chars", type=int, default=40_000)
    parser.add_argument("--concurrent", type=int, default=500)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--slow", type=float, default=3.0)
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_upstream:
        serve_upstream()
        return 0

    def give_up(signum: int, frame: object) -> None:
        raise TimeoutError(f"benchmark still running after {HARD_LIMIT_S} s; stopped")

    signal.signal(signal.SIGALRM, give_up)  # an exception, so the child processes are stopped
    signal.alarm(HARD_LIMIT_S)  # never hang a benchmark run
    with upstream_process() as (upstream_url, child):
        shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
        with (
            tempfile.TemporaryDirectory() as tmp,
            tempfile.TemporaryDirectory(dir=shm) as tmp_shm,
        ):
            work, work_shm = Path(tmp), Path(tmp_shm)
            echo_config = work / "echo.toml"
            echo_config.write_text(brain_config(upstream_url, db=work / "echo.db"))
            with (
                server_process(brain_config(upstream_url, db=work / "bench.db"), work) as srv,
                server_process(
                    brain_config(upstream_url, db=work_shm / "bench.db"), work_shm
                ) as srv_shm,
                transport_server_process(
                    echo_config,
                    handler="tests.support.connect_client:echo_handler",
                    env={"PYTHONPATH": str(REPO)},
                ) as echo,
            ):
                out = ["# Server overhead benchmark", "", *machine()]
                servers = [("DB on disk", srv), ("DB on tmpfs", srv_shm)]

                async def scenarios() -> None:
                    await timed(
                        "overhead", overhead(servers, upstream_url, args.turns, echo.port), out
                    )
                    await timed("throughput", throughput(srv, upstream_url, args.chars), out)
                    await timed(
                        "concurrency",
                        concurrency(
                            srv,
                            upstream_url,
                            child.pid,
                            args.concurrent,
                            args.connections,
                            args.slow,
                        ),
                        out,
                    )

                asyncio.run(scenarios())
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
