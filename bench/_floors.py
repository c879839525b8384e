"""Where the per-turn overhead comes from: the server against lighter stand-ins, interleaved.

    .venv/bin/python bench/_floors.py [--rounds 10] [--turns 100] [--db DIR]

Four servers at once against one scripted upstream, the Node client (bench/node_client.mjs)
alternating between them for `--rounds` rounds of `--turns` turns (the order reversed every
round), each turn paired with one straight to the upstream:

- `server`: `cursor-byok serve`, as shipped;
- `no store writes`: the same, with `SQLiteStore.commit_input` and `save_turn_marks` replaced by
  stubs that write nothing (an ablation, not a mode: it breaks every durability rule);
- `thinnest proxy`: our transport and our LLM path only (`proxy_handler` below: the OpenAI Chat
  adapter's request, its stream, `dialect.StreamEncoder`, `turn_ended`), no loop, no store,
  no context, no checkpoint;
- `echo`: the transport floor (a handler that answers at once; its "overhead" is against a
  direct turn that does call the upstream, so it shows the transport alone).

The differences between rows say what each layer adds. Not run by `bench/run` (its name starts
with `_`); figures are in docs/benchmarks-server.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.support.live import brain_config  # noqa: E402

import server_overhead as so  # noqa: E402

# `python -c NO_STORE serve ...`: the CLI with a store that writes nothing.
NO_STORE = """
import sys
from cursor_byok.store import sqlite
from cursor_byok.store.api import CommitResult

# Any signature: only what the stubs answer matters (save_turn_marks gained `unchanged=`).
async def commit_input(self, *args, **kwargs):
    expected = kwargs.get("expected_version", args[1] if len(args) > 1 else 0)
    return CommitResult(status="committed", version=expected + 1)

async def save_turn_marks(self, *args, **kwargs):
    return None

sqlite.SQLiteStore.commit_input = commit_input
sqlite.SQLiteStore.save_turn_marks = save_turn_marks
from cursor_byok.cli import main
sys.exit(main(sys.argv[1:]))
"""
METRICS = (("first text delta", "ttft"), ("whole turn", "total"))
_adapter: Any = None


async def proxy_handler(channel: Any, info: Any) -> None:
    """The thinnest proxy on our transport and LLM path (see the module docstring)."""
    from cursor_byok.llm.events import DoneEvent, ErrorEvent, TextDelta
    from cursor_byok.llm.openai_chat import OpenAIChatAdapter
    from cursor_byok.llm.settings import ModelSettings, ProviderSettings
    from cursor_byok.llm.types import RequestMessages, UserMessage
    from cursor_byok.transport import dialect

    global _adapter
    if _adapter is None:
        base_url = os.environ["FLOORS_UPSTREAM"] + "/v1"
        _adapter = OpenAIChatAdapter(
            ProviderSettings(name="brain", api="openai-chat", base_url=base_url)
        )
    first = await channel.receive()
    text = first.message.run_request.action.user_message_action.user_message.text
    request = RequestMessages("You are a helpful assistant.", (UserMessage.of_text(text),))
    stream = _adapter.send(_adapter.prepare(request, ModelSettings(model="brain-1")))
    encoder = dialect.StreamEncoder(model_call_id="call-1", now_ms=lambda: 0)
    while True:
        event = await stream.recv()
        if isinstance(event, TextDelta):
            for message in encoder.encode(event):
                channel.send(message)
        if isinstance(event, DoneEvent | ErrorEvent):
            break
    channel.send(dialect.turn_ended(event.message.usage))
    channel.finish(None)


@contextlib.contextmanager
def server(kind: str, upstream_url: str, db_dir: Path) -> Iterator[int]:
    work = Path(tempfile.mkdtemp(dir=db_dir))
    config = work / "cursor-byok.toml"
    config.write_text(brain_config(upstream_url, db=work / "db"))
    transport = [sys.executable, "-m", "cursor_byok.launch", "--config", str(config)]
    cmd = {
        "server": [sys.executable, "-m", "cursor_byok", "serve", "--config", str(config)],
        "no store writes": [sys.executable, "-c", NO_STORE, "serve", "--config", str(config)],
        "thinnest proxy": [*transport, "--handler", "_floors:proxy_handler"],
        "echo": [*transport, "--handler", "tests.support.connect_client:echo_handler"],
    }[kind]
    env = {
        **os.environ,
        "FLOORS_UPSTREAM": upstream_url,
        "PYTHONPATH": os.pathsep.join([str(REPO / "bench"), str(REPO)]),
    }
    with so.launched(cmd, work, f"the {kind!r} server", env) as port:
        yield port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--db", type=Path, default=Path("/dev/shm"), help="where the databases go")
    args = parser.parse_args(argv)
    if not so.node_available():
        print("bench/_floors.py needs node (bench/node_client.mjs)", file=sys.stderr)
        return 2
    kinds = ("server", "no store writes", "thinnest proxy", "echo")
    with contextlib.ExitStack() as stack:
        upstream_url, _ = stack.enter_context(so.upstream_process())
        ports = {k: stack.enter_context(server(k, upstream_url, args.db)) for k in kinds}
        keys = tuple(key for _, key in METRICS)
        rounds = so.interleaved_overheads(ports, upstream_url, args.rounds, args.turns, keys)
    print("## Where the overhead comes from")
    print()
    print(f"{args.rounds} rounds of {args.turns} turns, Node client, DB in {args.db}; ms over")
    print("direct, median of the rounds' medians.")
    print()
    print("| server | first text delta | whole turn |")
    print("|---|---:|---:|")
    for kind in kinds:
        cells = [f"{statistics.median(rounds[kind][key]):+.2f}" for _, key in METRICS]
        print(f"| {kind} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
