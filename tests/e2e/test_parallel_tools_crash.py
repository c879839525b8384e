"""A kill -9 in the middle of a batch of parallel tool calls, on the REAL server process over
the HTTP/1.1 shim: a side-effecting call is never run twice, and an answer already committed is
kept (never asked again)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cursor_byok.llm.types import ToolResultMessage
from tests.e2e.test_crash_recovery import (
    Crashable,
    ScriptedClient,
    ShimRun,
    chat_messages,
    complete_turn_logged,
    db_messages,
    db_operations,
    decoded,
    requests_with,
    resume_run_request,
    shim_http,
    user_run_request,
)
from tests.support.live import ThreadedUpstream
from tests.support.upstream import FakeUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with ThreadedUpstream() as up:
        yield up


@pytest.fixture
def crashable(upstream: FakeUpstream, tmp_path: Path) -> Iterator[Crashable]:
    server = Crashable(upstream, tmp_path)
    try:
        yield server
    finally:
        server.close()


async def test_kill9_mid_batch_keeps_the_answer_in_and_never_runs_a_side_effect_twice(
    crashable: Crashable, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Shell (side effects) and Read in one response: Read is answered, Shell still runs when
    the server dies. The restarted run sends neither again: the Read's answer was committed,
    the Shell's outcome is unknown and the model is told so."""
    conversation = f"conv-batch-{uuid.uuid4().hex[:6]}"
    prompt = 'batch-crash [tools Shell {"command": "touch /w/flag"} Read {"path": "/w/n.txt"}]'
    crashable.start()
    async with shim_http(crashable.url) as http:
        client = ScriptedClient(
            files={"/w/n.txt": "the notes\n"}, hold=frozenset({"shell_stream_args", "shell_args"})
        )
        run1 = ShimRun(http, "req-batch-1", client)
        try:
            await run1.open(user_run_request(conversation, prompt))
            await run1.wait_for(
                lambda: (
                    bool(run1.execs_of("shell_stream_args", "shell_args"))
                    and bool(run1.execs_of("read_args"))
                ),
                "both execs at once",
            )
            # The Read's answer is committed (held in the state until the Shell's).
            await run1.wait_for(
                lambda: ("Read", "completed", 0) in db_operations(crashable.db, conversation),
                "the Read answer committed",
            )
            assert ("Shell", "sent", 1) in db_operations(crashable.db, conversation)
            crashable.kill9()
            await run1.finish()
        finally:
            await run1.close()

    crashable.start()
    run2 = await complete_turn_logged(crashable, "req-batch-2", resume_run_request(conversation))
    assert run2.execs_of("shell_stream_args", "shell_args", "read_args") == [], run2.describe()
    sent = requests_with(upstream, prompt)
    assert len(sent) == 2, len(sent)
    tools = [m for m in chat_messages(sent[1]) if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call_p1", "call_p2"]
    assert "outcome is unknown" in json.dumps(tools[0]["content"]).lower()
    assert "the notes" in json.dumps(tools[1]["content"])
    messages = decoded(db_messages(crashable.db, conversation))
    results = [m for m in messages if isinstance(m, ToolResultMessage)]
    assert [r.tool_call_id for r in results] == ["call_p1", "call_p2"]  # each once
