"""Shared by bench/relay_overhead.py and bench/relay_concurrency.py: the servers they compare.

Not a benchmark (its name starts with `_`, so `bench/run` skips it).

- `relay`: bench/floor_relay.py, the floor (see its docstring);
- `server (this tree)`: `python -m cursor_byok serve --config ...` of this working tree;
- `server (REF)`: the server of commit REF, from a temporary worktree (bench/_ab.py's `source`
  and `LAUNCH`).

Each is a child process on a free port, healthy when yielded, with its database (servers
only) in a fresh directory under `db_dir`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.live import brain_config  # noqa: E402

import _ab  # noqa: E402
import server_overhead as so  # noqa: E402

RELAY_SCRIPT = Path(__file__).with_name("floor_relay.py")
NODE_CLIENT = Path(__file__).with_name("node_relay_client.mjs")
RELAY = "relay"
TREE = "server (this tree)"


@dataclass(frozen=True)
class Launched:
    name: str
    port: int
    pid: int
    src: Path | None = None  # a server's `src` directory; None: this tree's (or the relay)


def base_name(ref: str) -> str:
    return f"server ({ref})"


@contextlib.contextmanager
def relay(upstream_url: str, max_streams: int = 1000) -> Iterator[Launched]:
    cmd = [sys.executable, str(RELAY_SCRIPT), "--upstream", upstream_url]
    cmd += ["--max-streams", str(max_streams)]
    with so.launched_process(cmd, REPO, "the floor relay") as (port, pid):
        yield Launched(RELAY, port, pid)


@contextlib.contextmanager
def server(name: str, src: Path | None, upstream_url: str, db_dir: Path) -> Iterator[Launched]:
    """`src` None: this tree, as `python -m cursor_byok serve`; else that `src` directory."""
    work = Path(tempfile.mkdtemp(prefix="relay-bench-", dir=db_dir))
    try:
        config = work / "cursor-byok.toml"
        config.write_text(brain_config(upstream_url, db=work / "db"))
        if src is None:
            cmd = [sys.executable, "-m", "cursor_byok", "serve", "--config", str(config)]
        else:
            cmd = [sys.executable, "-c", _ab.LAUNCH, str(src), "serve", "--config", str(config)]
        with so.launched_process(cmd, work, f"the {name!r} server") as (port, pid):
            yield Launched(name, port, pid, src)
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)


def start_all(
    stack: contextlib.ExitStack, upstream_url: str, db_dir: Path, base: str | None
) -> tuple[list[Launched], list[str]]:
    """The relay, this tree's server and (with `base`) that commit's server, in that order,
    all stopped when `stack` closes; and a line for each server that did not start (this
    tree's may be mid-refactor): the others are still measured."""
    servers = [stack.enter_context(relay(upstream_url))]
    missing: list[str] = []
    wanted: list[tuple[str, Path | None]] = [(TREE, None)]
    if base:
        wanted.append((base_name(base), stack.enter_context(_ab.source(base))))
    for name, src in wanted:
        try:
            servers.append(stack.enter_context(server(name, src, upstream_url, db_dir)))
        except RuntimeError as exc:
            print(f"{exc}; measuring without it", file=sys.stderr)
            missing.append(f"{name}: did not start (not measured)")
    return servers, missing


def envelope_hex(prompt: str) -> str:
    payload = so.run_request(prompt).SerializeToString()
    return (b"\0" + len(payload).to_bytes(4, "big") + payload).hex()


def node(plan: dict[str, object], timeout: float = 180) -> dict[str, Any]:
    """bench/node_relay_client.mjs with `plan`: its JSON answer."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(plan, f)
        f.flush()
        done = subprocess.run(
            ["node", str(NODE_CLIENT), f.name], capture_output=True, text=True, timeout=timeout
        )
    if done.returncode != 0:
        raise RuntimeError(f"node client failed: {done.stderr.strip()[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def check_same_text(port: int, upstream_url: str, count: int = 8) -> str:
    """Run `count` turns keeping their text; '' when every turn's text through the server
    equals the text straight from the upstream, else what differed."""
    prompts = [f"check {i}: the quick brown fox, ünïcødé ✓ {i * 7}" for i in range(count)]
    plan = {
        "mode": "text",
        "port": port,
        "upstream": upstream_url,
        "prompts": prompts,
        "requests": [envelope_hex(p) for p in prompts],
    }
    try:
        out = node(plan, timeout=60)
    except RuntimeError as exc:
        return str(exc)
    for via, direct in zip(out["via"], out["direct"], strict=True):
        if not via["ok"] or via.get("text") != direct.get("text"):
            return f"via {via.get('text')!r} (ok={via['ok']}) != direct {direct.get('text')!r}"
    return ""
