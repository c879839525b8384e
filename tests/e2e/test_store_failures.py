"""Disk full, database locked, corrupt file: a clear error to the client and in the log, no
partial commit, the server stays up (docs/store.md "Errors").

- locked: the test holds SQLite's write lock (`BEGIN EXCLUSIVE`) on the server's database file
  while a run starts, and (second test) while the model streams its answer; the run fails after
  the store's busy_timeout (5 s) with an end-stream error naming the lock, nothing of the turn
  past the last commit is stored, and once the lock is released a new run (or a resume of the
  interrupted turn, with the same request bytes) succeeds.
- disk full: the server has no configuration knob for a size cap (and tests cannot mount a tiny
  filesystem), so this one runs the app in process with `SQLiteStore.set_size_limit`: full at
  the start of a turn and full when the answer is committed.
- corrupt: a garbage file is refused at start-up (exit status != 0, the message names the file);
  a file corrupted under a running server fails the run that touches it, and /healthz stays 200.

What the client sees: full and locked are `unavailable` (try again), anything else `internal`,
with a message that names neither the server's paths nor SQLite's words; the server's log has
both, with the run's request id."""

from __future__ import annotations

import base64
import json
import logging
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.app import App
from cursor_byok.config import parse_config
from cursor_byok.launch import probe_health_blocking, running_server
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_crash_recovery import (
    ScriptedClient,
    ShimRun,
    complete_turn,
    db_calls,
    db_messages,
    db_reader,
    db_state,
    db_version,
    poll,
    requests_with,
    resume_run_request,
    shim_http,
)
from tests.support.brain import text_reply
from tests.support.live import ServerProcess, ThreadedUpstream, brain_config, server_process
from tests.support.upstream import FakeUpstream, Reply

BUSY_TIMEOUT_S = 5.0  # SQLiteStore's default busy_timeout


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with ThreadedUpstream() as up:
        yield up


@pytest.fixture
def server(upstream: FakeUpstream, tmp_path: Path) -> Iterator[ServerProcess]:
    with server_process(brain_config(upstream.base_url, db=tmp_path / "byok.db"), tmp_path) as srv:
        yield srv


def run_request(conversation_id: str, text: str) -> a.AgentClientMessage:
    req = a.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = "brain-1"
    req.action.user_message_action.user_message.text = text
    return a.AgentClientMessage(run_request=req)


async def failed_run(base_url: str, request_id: str, first: a.AgentClientMessage) -> ShimRun:
    """A run expected to end with an end-stream error (within the busy timeout and a margin)."""
    async with shim_http(base_url) as http:
        run = ShimRun(http, request_id, ScriptedClient())
        try:
            await run.open(first)
            await run.finish(timeout=BUSY_TIMEOUT_S + 10)
        finally:
            await run.close()
    assert run.result.error is not None, run.describe()
    assert not run.result.turn_ended, run.describe()
    return run


def client_visible(error: Mapping[str, Any]) -> str:
    """Everything of an end-stream error the client can read: message and ErrorDetails."""
    parts = [str(error.get("message", ""))]
    for detail in error.get("details", []):
        raw = str(detail.get("value", ""))
        parts.append(base64.b64decode(raw + "=" * (-len(raw) % 4)).decode("utf-8", "replace"))
    return "\n".join(parts)


def assert_no_server_details(error: Mapping[str, Any], tmp_path: Path) -> None:
    text = client_visible(error)
    assert str(tmp_path) not in text and ".db" not in text, error
    assert "SQLITE_" not in text and "batch" not in text, error


def no_trace(db: Path, conversation_id: str) -> None:
    """Nothing of the conversation was committed."""
    with db_reader(db) as conn:
        for table in ("conversations", "messages", "input_commits", "llm_calls"):
            n = conn.execute(
                f"SELECT count(*) FROM {table} WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()[0]
            assert n == 0, f"{table} holds {n} row(s) of {conversation_id!r}"


async def test_locked_database_is_a_clear_error_and_the_next_run_works(
    server: ServerProcess, upstream: FakeUpstream, tmp_path: Path
) -> None:
    db = tmp_path / "byok.db"
    conv = "conv-locked"
    locker = sqlite3.connect(db, isolation_level=None, timeout=5)
    try:
        locker.execute("BEGIN EXCLUSIVE")
        run = await failed_run(server.url, "locked-1", run_request(conv, "locked: hello"))
        locker.execute("ROLLBACK")
    finally:
        locker.close()
    error = run.result.error
    assert error is not None
    assert error["code"] == "unavailable", error
    assert "storage is busy" in error["message"] and "try again" in error["message"], error
    assert_no_server_details(error, tmp_path)
    log = server.log()
    lines = [line for line in log.splitlines() if "locked-1" in line and "locked" in line]
    assert lines and str(db) in lines[0], log[-3000:]
    assert not requests_with(upstream, "locked: hello"), "the model was called without a commit"
    no_trace(db, conv)

    # The lock is gone: the same server serves the same conversation.
    assert probe_health_blocking("127.0.0.1", server.port)
    done = await complete_turn(server.url, "locked-2", run_request(conv, "locked: again"))
    assert done.text == "You said: locked: again"
    assert len(db_messages(db, conv)) == 2


async def test_lock_taken_during_a_turn_commits_nothing_and_the_turn_resumes(
    server: ServerProcess, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The lock arrives while the model streams: the answer cannot be committed, the run ends
    with the lock error, the history keeps only the user message, and a resume after the lock
    is gone sends the same call again and commits the answer once."""
    db = tmp_path / "byok.db"
    conv = "conv-locked-mid"
    prompt = "locked mid-turn: hello"
    answer = f"You said: {prompt}"
    upstream.push(text_reply(answer, delay_s=0.05))
    locker = sqlite3.connect(db, isolation_level=None, timeout=5)
    try:
        async with shim_http(server.url) as http:
            run = ShimRun(http, "locked-mid-1", ScriptedClient())
            try:
                await run.open(run_request(conv, prompt))
                await poll(
                    lambda: (db_state(db, conv) or {}).get("status") == "WaitingLLM",
                    "the committed start of the turn",
                )
                locker.execute("BEGIN EXCLUSIVE")
                await run.finish(timeout=BUSY_TIMEOUT_S + 10)
            finally:
                await run.close()
        locker.execute("ROLLBACK")
    finally:
        locker.close()
    error = run.result.error
    assert error is not None and not run.result.turn_ended, run.describe()
    assert error["code"] == "unavailable" and "busy" in error["message"], error
    assert_no_server_details(error, tmp_path)
    state = db_state(db, conv)
    assert state is not None and state["status"] == "WaitingLLM", state
    assert len(db_messages(db, conv)) == 1  # the user message only: no half-committed answer
    calls = db_calls(db, conv)
    assert len(calls) == 1 and calls[0][2] != "committed", calls

    done = await complete_turn(server.url, "locked-mid-2", resume_run_request(conv))
    assert done.text == answer, done.describe()
    sent = requests_with(upstream, prompt)
    assert len(sent) == 2 and sent[1].body == sent[0].body
    assert len(db_messages(db, conv)) == 2
    assert [(c[0], c[2]) for c in db_calls(db, conv)] == [(calls[0][0], "committed")]


def big_slow_answer(text: str) -> Reply:
    """An answer of a few large deltas, ~1 s in all, then finish and [DONE]."""
    events = [_delta({"role": "assistant", "content": ""})]
    events += [_delta({"content": text[i : i + 4000]}) for i in range(0, len(text), 4000)]
    events += [_delta({}, finish="stop"), "[DONE]"]
    return Reply.events(events, delay_s=0.15)


def _delta(delta: dict[str, str], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return json.dumps(
        {"id": "chatcmpl-big", "object": "chat.completion.chunk", "choices": [choice]}
    )


async def test_disk_full_is_a_clear_error_and_the_next_run_works(
    upstream: FakeUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "full.db"
    conv = "conv-full"
    config = parse_config(brain_config(upstream.base_url, db=db))
    app = await App.open(config)
    caplog.set_level(logging.ERROR)
    try:
        async with running_server(config, app.runner.handle) as srv:
            # Warm up, then cap the size at what the file holds now (the store raises a cap
            # below the current size to it): the next write that needs a new page fails.
            await complete_turn(srv.base_url, "full-0", run_request("conv-warm", "warm up"))
            await app.store.set_size_limit(1)
            # Long enough to need new pages whatever the free pages the warm-up left.
            hi = "disk full: hi " + "x" * 64_000
            run = await failed_run(srv.base_url, "full-1", run_request(conv, hi))
            error = run.result.error
            assert error is not None
            assert error["code"] == "unavailable", error
            assert "storage is full" in error["message"] and "try again" in error["message"]
            assert_no_server_details(error, tmp_path)
            logged = [r.getMessage() for r in caplog.records if "full-1" in r.getMessage()]
            assert any("full" in m and str(db) in m for m in logged), logged
            assert not requests_with(upstream, "disk full: "), "the model was called"
            no_trace(db, conv)

            # The cap is lifted: the same server and conversation work again.
            await app.store.set_size_limit(None)
            done = await complete_turn(srv.base_url, "full-2", run_request(conv, "disk ok now"))
            assert done.text == "You said: disk ok now"
            assert len(db_messages(db, conv)) == 2

            # Full in the middle of a turn: the big answer cannot be committed; nothing of it is.
            prompt = "disk full mid-turn"
            answer = "".join(f"{i:06d} " for i in range(4000))  # 28 KB: needs new pages
            upstream.push(big_slow_answer(answer), big_slow_answer(answer))
            async with shim_http(srv.base_url) as http:
                run = ShimRun(http, "full-3", ScriptedClient())
                try:
                    await run.open(run_request(conv, prompt))
                    await poll(
                        lambda: (db_state(db, conv) or {}).get("status") == "WaitingLLM",
                        "the committed start of the turn",
                    )
                    await app.store.set_size_limit(1)
                    await run.finish()
                finally:
                    await run.close()
            error = run.result.error
            assert error is not None and error["code"] == "unavailable", run.describe()
            assert "storage is full" in error["message"], error
            assert_no_server_details(error, tmp_path)
            assert not run.result.turn_ended
            state = db_state(db, conv)
            assert state is not None and state["status"] == "WaitingLLM", state
            assert len(db_messages(db, conv)) == 3  # turn 1 and the new user message only
            assert all(c[2] != "committed" for c in db_calls(db, conv)[-1:])

            await app.store.set_size_limit(None)
            done = await complete_turn(srv.base_url, "full-4", resume_run_request(conv))
            assert done.text == answer
            sent = requests_with(upstream, prompt)
            assert len(sent) == 2 and sent[1].body == sent[0].body
            assert len(db_messages(db, conv)) == 4
    finally:
        await app.close()


def test_garbage_database_file_is_refused_at_start(upstream: FakeUpstream, tmp_path: Path) -> None:
    db = tmp_path / "garbage.db"
    db.write_bytes(b"this is not a sqlite database " * 200)
    config = brain_config(upstream.base_url, db=db)
    with pytest.raises(RuntimeError) as err, server_process(config, tmp_path):
        pass
    text = str(err.value)
    assert text.startswith("server exited (") and not text.startswith("server exited (0)"), text
    assert str(db) in text and "not a database" in text, text
    assert "Traceback" not in text, text


async def test_database_corrupted_while_running_fails_the_run_and_the_server_stays_up(
    server: ServerProcess, upstream: FakeUpstream, tmp_path: Path
) -> None:
    db = tmp_path / "byok.db"
    conv = "conv-corrupt"
    await complete_turn(server.url, "corrupt-1", run_request(conv, "corrupt: first"))
    version = db_version(db, conv)

    # Move everything into the main file, then overwrite the history table's root page.
    conn = sqlite3.connect(db, isolation_level=None, timeout=5)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
        root, page_size = conn.execute(
            "SELECT rootpage, (SELECT page_size FROM pragma_page_size()) FROM sqlite_master "
            "WHERE name = 'messages'"
        ).fetchone()
    finally:
        conn.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xde\xad\xbe\xef" * (page_size // 4))

    run = await failed_run(server.url, "corrupt-2", run_request(conv, "corrupt: second"))
    error = run.result.error
    assert error is not None
    assert error["code"] == "internal", error
    assert "could not read or write its storage" in error["message"], error
    assert "corrupt" not in client_visible(error), error
    assert_no_server_details(error, tmp_path)
    log = server.log()
    lines = [line for line in log.splitlines() if "corrupt-2" in line and "corrupt" in line]
    assert lines and str(db) in lines[0], log
    assert not requests_with(upstream, "corrupt: second"), "the model was called"
    assert db_version(db, conv) == version  # no partial commit

    assert server.proc.poll() is None, "the server died"
    assert probe_health_blocking("127.0.0.1", server.port)
