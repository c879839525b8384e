"""A long session with real parts only: the real third-party Cursor client (oh-my-pi, HTTP/2) ->
our server -> llama-server with a real model, the model's window configured as the fixed part of
the request (system prompt and tools, measured on the first call) plus about 2,000 tokens. A
conversation of 30 turns never fails on context length: the server compacts it, and no request
it sends is larger than the window."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

from cursor_byok.loop.meter import Meter
from cursor_byok.transport.runtime.records import decode_call_meter
from tests.e2e.conftest import bun
from tests.realupstream.conftest import LlamaServer
from tests.support.live import REPO, server_process

TURNS = 30
HEADROOM = 2000  # tokens of history the window holds besides the fixed part
PROMPT = (
    "Tell me one short fact about the sea, in a single sentence. For context, here is a note "
    "I keep about it: the sea covers most of the planet, its water is salty, it has tides "
    "that follow the moon, waves that the wind raises, and deep parts nobody has seen."
)


def config(llama: LlamaServer, db: Path, window: int) -> str:
    return f"""
[server]
database = "{db}"

[providers.llama]
api = "openai-chat"
base_url = "{llama.v1_url}"

[models.local]
provider = "llama"
model = "{llama.model}"
context_window = {window}
max_output_tokens = 48
temperature = 0
"""


def drive_turns(
    client: Path, script: Path, base: str, turns: int
) -> subprocess.CompletedProcess[str]:
    cmd = [bun(client), str(script), "--base", base, "--quiet", "--model", "local"]
    cmd += ["--prompt", PROMPT, "--turns", str(turns), "--timeout", "240"]
    return subprocess.run(
        cmd, cwd=client, capture_output=True, text=True, timeout=240 * turns, check=False
    )


def prompt_sizes(db: Path) -> list[tuple[str, int]]:
    """(call id, prompt tokens as the provider counted them) of every finished call."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT call_id, COALESCE(input_tokens, 0) + COALESCE(cache_read_tokens, 0) "
            "+ COALESCE(cache_write_tokens, 0) FROM llm_calls WHERE status = 'committed' "
            "ORDER BY created_at_ms, call_id"
        ).fetchall()
    return [(str(r[0]), int(r[1])) for r in rows]


def meters_of(db: Path) -> list[Meter]:
    """The measured context meter of every committed model call (llm_calls.prompt_breakdown)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT prompt_breakdown FROM llm_calls WHERE status = 'committed' "
            "AND prompt_breakdown IS NOT NULL ORDER BY created_at_ms, call_id"
        ).fetchall()
    meters = [decode_call_meter(bytes(r[0])).meter for r in rows]
    return [m for m in meters if m.measured]


def test_thirty_turns_through_the_real_client_never_fail_on_context_length(
    llama_server_8k: LlamaServer, realclient: Path, tmp_path: Path
) -> None:
    # A copy of our driver of its own: the client folder is shared by every checkout's tests.
    script = realclient / f"drive-compaction-{os.getpid()}.ts"
    shutil.copy(REPO / "tests" / "realclient" / "drive.ts", script)
    try:
        # Measure the fixed part: one short turn, its prompt tokens as llama-server counts them.
        with server_process(config(llama_server_8k, tmp_path / "m.db", 8192), tmp_path) as srv:
            r = drive_turns(realclient, script, srv.url, 1)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:] + srv.log()[-3000:]
        ((_, fixed),) = prompt_sizes(tmp_path / "m.db")
        window = fixed + HEADROOM
        assert window <= 8192, f"the fixed part ({fixed} tokens) leaves no room in 8,192"

        work = tmp_path / "long"
        work.mkdir()
        db = work / "db"
        with server_process(config(llama_server_8k, db, window), work) as srv:
            r = drive_turns(realclient, script, srv.url, TURNS)
            log = srv.log()
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:] + log[-4000:]
        assert r.stdout.count("[turn] ") == TURNS and "failed" not in r.stdout.split("[turn]")[-1]
        assert "DRIVE OK" in r.stdout
        compactions = [line for line in log.splitlines() if "compacted (" in line]
        assert compactions, "30 turns in a window of fixed + 2,000 tokens never compacted"
        assert "context" not in " ".join(line for line in log.splitlines() if "ERROR" in line)
        sizes = prompt_sizes(db)
        assert len([c for c, _ in sizes if ":summary" not in c]) >= TURNS
        too_big = [(c, n) for c, n in sizes if n > window]
        assert not too_big, f"requests over the window of {window}: {too_big}"
        # The context meter each call recorded (what the checkpoints show) stays below it too.
        meters = meters_of(db)
        assert len(meters) >= TURNS
        assert all(m.max_tokens == window for m in meters)
        over = [m.used_tokens for m in meters if m.used_tokens >= window]
        assert not over, f"meter at or over the window of {window}: {over}"
        print(
            f"\nlong session: window {window} (fixed {fixed}), {TURNS} turns, "
            f"{len(compactions)} compactions, prompt tokens per call: {[n for _, n in sizes]}"
        )
    finally:
        script.unlink(missing_ok=True)
