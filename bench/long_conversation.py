"""What a turn costs as one conversation grows: does the server's work stay flat?

    .venv/bin/python bench/long_conversation.py [--turns 240] [--pad 1500] [--base REF]

One conversation, `--turns` turns one after the other, through `cursor-byok serve` (DB on
tmpfs) and the scripted upstream, driven by the Node client (bench/node_client.mjs) in windows
of `WINDOW` turns. Each user message carries `--pad` bytes of code-like text, so the history
grows by about two messages and `--pad` bytes a turn, as an agent session does. Per window it
reports the history at the window's start, the medians of the first text delta and the whole
turn (ms from sending the run request), and the server's CPU per turn (from /proc).

What used to grow with the history in a turn: reading the conversation at its start (load
and decode every stored message), hashing the history before the model call and at the end of
the turn, converting every message for the provider, and the bytes stored for the call. Each
now continues from the previous turn or call: transport/committed_states.py,
llm/canonical.py `messages_hash`, the adapters' history folds (llm/prefix_memo.py) and
transport/stored_request.py. What still grows: encoding the body (msgspec, C), hashing it,
finding the delta to store, sending it, and the scripted upstream parsing it.

With `--base REF` (a git commit) a second server runs that version on its own copy of the
same conversation, and the windows alternate between the two, so both see the same drift of
the machine. Not in `bench/run` by default with `--base` (it needs two versions).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.live import brain_config  # noqa: E402

import _ab as ab  # noqa: E402
import server_overhead as so  # noqa: E402
from cursor_byok.transport.cursor.proto import agent_pb2  # noqa: E402

WINDOW = 20
CODE_LINE = "    result = compute(items[index], options.get('mode', 'fast'))  # keep order\n"


@contextlib.contextmanager
def server(src: Path, upstream_url: str, db_dir: Path) -> Iterator[tuple[int, int]]:
    """(port, pid) of a server running the code in `src`."""
    work = Path(tempfile.mkdtemp(dir=db_dir))
    config = work / "cursor-byok.toml"
    config.write_text(brain_config(upstream_url, db=work / "byok.db"))
    cmd = [sys.executable, "-c", ab.LAUNCH, str(src), "serve", "--config", str(config)]
    with so.launched_process(cmd, work, f"the server from {src}") as server:
        yield server


def envelope_hex(conversation_id: str, text: str) -> str:
    req = agent_pb2.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = "brain-1"
    uma = req.action.user_message_action
    uma.user_message.text = text
    uma.request_context.env.os_version = "linux bench"
    uma.request_context.env.workspace_paths.append("/tmp/bench")
    payload = agent_pb2.AgentClientMessage(run_request=req).SerializeToString()
    return (b"\0" + len(payload).to_bytes(4, "big") + payload).hex()


def prompt(turn: int, pad: int) -> str:
    body = (CODE_LINE * (pad // len(CODE_LINE) + 1))[:pad]
    return f"[brief] turn {turn}: look at this and keep it in mind\n{body}"


def window(port: int, conversation_id: str, turns: range, pad: int) -> list[dict[str, float]]:
    prompts = [prompt(t, pad) for t in turns]
    plan = {
        "port": port,
        "upstream": None,
        "warmup": 0,
        "prompts": prompts,
        "requests": [envelope_hex(conversation_id, p) for p in prompts],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(plan, f)
        f.flush()
        done = subprocess.run(
            ["node", str(so.NODE_CLIENT), f.name], capture_output=True, text=True, timeout=300
        )
    if done.returncode != 0:
        raise RuntimeError(f"node client failed: {done.stderr.strip()[-2000:]}")
    out: list[dict[str, float]] = json.loads(done.stdout)["via"]
    if not all(t["ok"] for t in out):
        raise RuntimeError("a turn failed")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=240)
    parser.add_argument("--pad", type=int, default=1500, help="bytes of text per user message")
    parser.add_argument("--base", help="a git commit to compare with, window by window")
    parser.add_argument("--db", default="/dev/shm" if Path("/dev/shm").is_dir() else None)
    args = parser.parse_args(argv)
    if not so.node_available():
        print("node is not installed: this benchmark needs it", file=sys.stderr)
        return 1
    versions: dict[str, str | None] = {"this tree": None}
    if args.base is not None:
        versions = {args.base: args.base, **versions}
    db_dir = Path(tempfile.mkdtemp(dir=args.db))
    rows: dict[str, list[tuple[int, float, float, float]]] = {name: [] for name in versions}
    with contextlib.ExitStack() as stack:
        upstream_url, _ = stack.enter_context(so.upstream_process())
        servers = {}
        for name, ref in versions.items():
            src = stack.enter_context(ab.source(ref or str(REPO / "src")))
            servers[name] = stack.enter_context(server(src, upstream_url, db_dir))
        conversations = {name: f"long-{os.urandom(6).hex()}" for name in versions}
        names = list(versions)
        for start in range(0, args.turns, WINDOW):
            turns = range(start, min(args.turns, start + WINDOW))
            for name in names if (start // WINDOW) % 2 == 0 else reversed(names):
                port, pid = servers[name]
                cpu0 = so.cpu_seconds(pid)
                out = window(port, conversations[name], turns, args.pad)
                cpu = (so.cpu_seconds(pid) - cpu0) / len(turns)
                rows[name].append(
                    (
                        start * 2,
                        statistics.median(t["first"] for t in out),
                        statistics.median(t["total"] for t in out),
                        cpu * 1000,
                    )
                )
            print(f"turns {turns.start}-{turns.stop - 1} done", file=sys.stderr)

    print("# Long conversation benchmark\n")
    print(
        f"One conversation of {args.turns} turns, {args.pad} bytes of text per user message, "
        f"windows of {WINDOW} turns; ms, medians of the window; DB in {args.db or 'a temp dir'}; "
        f"{os.cpu_count()} cores.\n"
    )
    header = "| history at window start | " + " | ".join(
        f"{name}: first delta | {name}: whole turn | {name}: CPU/turn" for name in versions
    )
    print(header + " |")
    print("|---:|" + "---:|---:|---:|" * len(versions))
    for i in range(len(rows[names[0]])):
        messages = rows[names[0]][i][0]
        cells = [f"{messages} messages, ~{messages // 2 * args.pad // 1024} KB"]
        for name in versions:
            _, first, total, cpu = rows[name][i]
            cells.append(f"{first:.2f} | {total:.2f} | {cpu:.1f}")
        print("| " + " | ".join(cells) + " |")
    print()
    for name in versions:
        quarter = max(1, len(rows[name]) // 4)
        early, late = rows[name][:quarter], rows[name][-quarter:]
        span = statistics.median(r[0] for r in late) - statistics.median(r[0] for r in early)
        per100 = 100 / span if span else 0.0
        growth = [
            (statistics.median(r[k] for r in late) - statistics.median(r[k] for r in early))
            * per100
            for k in (1, 2, 3)
        ]
        print(
            f"- {name}: per 100 more messages, first delta {growth[0]:+.2f} ms, "
            f"whole turn {growth[1]:+.2f} ms, server CPU {growth[2]:+.2f} ms/turn "
            f"(last quarter of the windows against the first)."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
