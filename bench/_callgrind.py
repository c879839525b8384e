"""Instructions per turn of a server process, counted by valgrind's callgrind.

Not a benchmark (its name starts with `_`); bench/regression_guard.py and
bench/_profile_turns.py use it.

The server (`cmd --port PORT`) runs under `valgrind --tool=callgrind`; only that process is
traced (valgrind does not follow children). After it answers /healthz, the Node client
(bench/node_client.mjs) sends `warmup` turns (imports, caches, the first connection), then
`callgrind_control --zero` resets the counters, `turns` more turns run, and
`callgrind_control --dump` writes the counts of exactly those turns: every thread of the
server (the event loop, the store's writer thread, granian's threads), not the client, not
the upstream. Each turn is a new conversation with one model call (bench/server_overhead.py's
`run_request`), against the scripted upstream.

Why instructions: they do not depend on what else the machine runs, so two runs of the same
code agree to about a percent where timed CPU drifts by tens of percent on this shared 2-core
VM (docs/benchmarks-server.md, "The regression guard").
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.live import free_port, probe_health_blocking  # noqa: E402

import server_overhead as so  # noqa: E402

START_TIMEOUT_S = 900  # a start under valgrind: 50 s on a quiet VM, minutes on a loaded one


@dataclass(frozen=True)
class Counted:
    instructions: int  # of the `turns` measured turns, less the idle work of their seconds
    turns: int
    dump: Path | None  # the callgrind file of those turns (kept only when asked)
    raw: int = 0  # what the dump counted, idle work included
    seconds: float = 0.0  # how long the measured turns took (under valgrind)
    idle_per_s: float = 0.0  # instructions per second of the idle server

    @property
    def per_turn(self) -> float:
        return self.instructions / self.turns


def node_plan_turns(port: int, prompts: list[str], requests: list[str] | None = None) -> None:
    """Run one turn per prompt through the Node client, no direct path, no warm-up."""
    if requests is None:
        requests = []
        for prompt in prompts:
            payload = so.run_request(prompt).SerializeToString()
            requests.append((b"\0" + len(payload).to_bytes(4, "big") + payload).hex())
    plan = {"port": port, "upstream": None, "warmup": 0, "prompts": prompts, "requests": requests}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(plan, f)
        f.flush()
        done = subprocess.run(
            ["node", str(so.NODE_CLIENT), f.name], capture_output=True, text=True, timeout=900
        )
    if done.returncode != 0:
        raise RuntimeError(f"node client failed: {done.stderr.strip()[-2000:]}")
    turns = json.loads(done.stdout)["via"]
    if len(turns) != len(prompts) or not all(t["ok"] for t in turns):
        raise RuntimeError("a turn failed under callgrind")


def summary(dump: Path) -> int:
    """The `summary:` line of a callgrind file: the Ir of the dump, all threads."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary line in {dump}")


def _control(*args: str) -> None:
    done = subprocess.run(["callgrind_control", *args], capture_output=True, text=True)
    if done.returncode != 0 or "OK" not in done.stdout:
        raise RuntimeError(f"callgrind_control {' '.join(args)}: {done.stdout}{done.stderr}")


@contextlib.contextmanager
def under_callgrind(
    cmd: list[str], work: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[int, int]]:
    """`cmd --port PORT` under callgrind, healthy: (port, pid); dumps go to
    work/callgrind.out.N."""
    port = free_port()
    out = work / "callgrind.out"
    full = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        "--dump-line=no",
        *cmd,
        "--port",
        str(port),
    ]
    log = (work / "valgrind.log").open("w")
    proc = subprocess.Popen(full, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        t0 = time.monotonic()
        while not probe_health_blocking("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() - t0 > START_TIMEOUT_S:
                tail = (work / "valgrind.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{cmd!r} did not start under callgrind:\n{tail}")
            time.sleep(0.2)
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def _latest(work: Path) -> int:
    dumps = sorted(work.glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]))
    if not dumps:
        raise RuntimeError("callgrind wrote no dump")
    return summary(dumps[-1])


def count_turns(
    cmd: list[str],
    *,
    turns: int = 30,
    warmup: int = 10,
    idle_s: float = 20.0,
    env: dict[str, str] | None = None,
    keep: Path | None = None,
    prompt: str = "hello number {i}, how are you",
) -> Counted:
    """Instructions of `turns` one-call turns of the server `cmd`, after `warmup` turns.

    A server also works by the clock when idle (the token directory's reload every 2 s,
    timers, the session reaper): the slower valgrind runs, as on a loaded machine, the more of
    it falls inside the measured turns. So the idle rate is counted first (`idle_s` seconds
    with no request) and its share of the turns' seconds is taken off: what is left is the
    work of the turns, whatever the load. `keep`: copy the callgrind file of the measured
    turns there (for callgrind_annotate)."""
    env = {**(env or os.environ), "PYTHONHASHSEED": "0"}  # the same dict and set orders
    with tempfile.TemporaryDirectory(prefix="callgrind-", dir=_scratch()) as tmp:
        work = Path(tmp)
        with under_callgrind(cmd, work, env) as (port, pid):
            node_plan_turns(port, [f"warm up {i}" for i in range(warmup)])
            _control("--zero", str(pid))
            t0 = time.monotonic()
            time.sleep(idle_s)
            _control("--dump", str(pid))
            idle_per_s = _latest(work) / (time.monotonic() - t0)
            _control("--zero", str(pid))
            t1 = time.monotonic()
            node_plan_turns(port, [prompt.format(i=i) for i in range(turns)])
            _control("--dump", str(pid))
            seconds = time.monotonic() - t1
            raw = _latest(work)
            kept = None
            if keep is not None:
                dumps = sorted(work.glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]))
                keep.parent.mkdir(parents=True, exist_ok=True)
                kept = Path(keep)
                kept.write_bytes(dumps[-1].read_bytes())
    net = max(0, round(raw - idle_per_s * seconds))
    return Counted(net, turns, kept, raw, seconds, idle_per_s)


def _scratch() -> str | None:
    return "/dev/shm" if Path("/dev/shm").is_dir() else None
