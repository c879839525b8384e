"""A long session on the real local model, with and without compaction: turns survived and
prompt tokens per request.

    .venv/bin/python bench/long_session.py [--turns 30] [--headroom 2000]

llama-server (scripts/llama_server.sh: SmolLM2-135M, CPU) with an 8,192-token context; our
server in front of it; the real third-party client (tests/realclient, `drive.ts --turns`)
sends one conversation of `--turns` turns. The model's window is configured as the fixed part
of the request (system prompt and tools, measured on a first call) plus `--headroom` tokens.

- with compaction: that window, so the server compacts as the conversation fills it;
- without: a window so large no compaction starts, and the figure is the turn whose request
  first passes the same window (the turns a model of that window would have survived).

Prints a markdown section: per configuration the turns completed, the compactions, and the
prompt tokens of every request (as llama-server counted them). It takes minutes of CPU for
the model (`bench/run long_session` runs it alone; the first run on a machine also builds
llama-server, about 8 minutes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.realupstream.conftest import LlamaServer, _ensure_artifacts, _start, _stop  # noqa: E402
from tests.realupstream.test_compaction_real import (  # noqa: E402
    config,
    drive_turns,
    prompt_sizes,
)
from tests.support.live import server_process  # noqa: E402

CTX = 8192


def client_folder() -> Path:
    out = subprocess.run(
        ["bash", str(ROOT / "tests" / "realclient" / "setup.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def session(
    llama: LlamaServer, client: Path, script: Path, work: Path, window: int, turns: int
) -> tuple[int, int, list[int], float]:
    """(turns completed, compactions, prompt tokens per model call, seconds)."""
    work.mkdir()
    db = work / "db"
    started = time.monotonic()
    with server_process(config(llama, db, window), work) as srv:
        r = drive_turns(client, script, srv.url, turns)
        log = srv.log()
    seconds = time.monotonic() - started
    done = sum(1 for line in r.stdout.splitlines() if line.startswith("[turn]") and "ok" in line)
    compactions = sum(1 for line in log.splitlines() if "compacted (" in line)
    sizes = [n for c, n in prompt_sizes(db) if ":summary" not in c]
    return done, compactions, sizes, seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--headroom", type=int, default=2000)
    args = parser.parse_args()
    env = _ensure_artifacts()
    client = client_folder()
    script = client / f"drive-bench-{os.getpid()}.ts"
    shutil.copy(ROOT / "tests" / "realclient" / "drive.ts", script)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        proc, port, _ = _start(env, root / "llama.log", CTX)
        llama = LlamaServer(
            base_url=f"http://127.0.0.1:{port}",
            model="smollm2",
            port=port,
            binary=Path(env["LLAMA_SERVER"]),
            model_path=Path(env["LLAMA_MODEL"]),
            chat_template=Path(env["LLAMA_CHAT_TEMPLATE"]),
            log_path=root / "llama.log",
            startup_s=0.0,
        )
        try:
            measure = root / "measure"
            measure.mkdir()
            with server_process(config(llama, measure / "db", CTX), measure) as srv:
                drive_turns(client, script, srv.url, 1)
            ((_, fixed),) = prompt_sizes(measure / "db")
            window = fixed + args.headroom
            with_c = session(llama, client, script, root / "with", window, args.turns)
            without = session(llama, client, script, root / "without", 1_000_000, args.turns)
        finally:
            _stop(proc)
            script.unlink(missing_ok=True)
    passed = next((i + 1 for i, n in enumerate(without[2]) if n > window), None)
    print("## Long session on the real local model (SmolLM2-135M, llama-server, CPU)\n")
    print(
        f"Window: the fixed part ({fixed:,} tokens: system prompt and tools) + "
        f"{args.headroom:,} = {window:,} tokens; {args.turns} turns through the real client; "
        "prompt tokens as llama-server counted them.\n"
    )
    print("| | turns completed | compactions | largest request | over the window | seconds |")
    print("|---|---:|---:|---:|---|---:|")
    for name, (done, comp, sizes, secs) in (("with compaction", with_c), ("without", without)):
        over = [i + 1 for i, n in enumerate(sizes) if n > window]
        first = f"from request {over[0]}" if over else "never"
        print(f"| {name} | {done} | {comp} | {max(sizes, default=0):,} | {first} | {secs:.0f} |")
    print()
    if passed is not None:
        print(f"Without compaction the request passes the window at model call {passed}.\n")
    print("Prompt tokens per model call, with compaction:", ", ".join(map(str, with_c[2])))
    print()
    print("Without:", ", ".join(map(str, without[2])))


if __name__ == "__main__":
    main()
