"""Two server processes on one database (a SQLite file, a PostgreSQL database: each test runs
on both), one conversation: the version CAS decides. A run
that loses the race reloads, sees the conversation continued elsewhere and ends canceled; the
history holds exactly one answer, never two appends for one turn."""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path

from cursor_byok.llm import canonical
from cursor_byok.llm.types import AssistantMessage, UserMessage
from cursor_byok.transport.runtime.stored_request import is_delta, load_request
from tests.e2e.test_crash_recovery import requests_with
from tests.e2e.test_shim import ShimRun, http, is_text, run_request, unique
from tests.support import postgres
from tests.support.live import brain_config, server_process
from tests.support.upstream import FakeUpstream


def history(db: Path | str, conversation_id: str) -> list[object]:
    with postgres.reader(db) as conn:
        rows = conn.execute(
            "SELECT seq, body FROM messages WHERE conversation_id = ? ORDER BY seq",
            (conversation_id,),
        ).fetchall()
    assert [r[0] for r in rows] == list(range(len(rows)))  # no gaps, no duplicates
    return [canonical.decode_message(bytes(r[1])) for r in rows]


async def test_a_run_that_loses_the_race_keeps_nothing(
    upstream: FakeUpstream, tmp_path: Path, shared_database: str
) -> None:
    db = shared_database
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    conversation = str(uuid.uuid4())
    slow = unique("[slow 3] from server A")
    fast = unique("from server B")
    with (
        server_process(brain_config(upstream.base_url, db=db), work_a) as a,
        server_process(brain_config(upstream.base_url, db=db), work_b) as b,
    ):
        async with http(a) as client_a, http(b) as client_b:
            run_a = ShimRun(client_a)
            run_b = ShimRun(client_b)
            async with run_a.subscribe() as reader_a:
                await run_a.append(run_request(slow, conversation))
                await reader_a.wait_for(is_text)  # A is streaming its answer
                async with run_b.subscribe() as reader_b:
                    await run_b.append(run_request(fast, conversation))
                    end_b = await reader_b.wait_end(20)
                end_a = await reader_a.wait_end(20)
    assert end_b == {} and reader_b.turn_ended
    assert end_a.get("error", {}).get("code") == "canceled", end_a
    assert not reader_a.turn_ended
    messages = history(db, conversation)
    assert [type(m) for m in messages] == [UserMessage, UserMessage, AssistantMessage]
    assert isinstance(messages[-1], AssistantMessage)
    assert messages[-1].text == f"You said: {fast}"
    assert "server A" not in messages[-1].text


async def test_turns_alternating_between_processes_see_each_others_history(
    upstream: FakeUpstream, tmp_path: Path, shared_database: str
) -> None:
    """Each process keeps its last committed state for the next turn (committed_states.py) and
    its last request as the base of the next stored delta (stored_request.py). When the other
    process answered a turn in between, the kept state is stale: the next turn must load the
    conversation again (no commit against an old version, so no "changed under this run" in
    either log), send the whole history, and every stored request must still rebuild to the
    bytes that were sent."""
    db = shared_database
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    conversation = str(uuid.uuid4())
    prompts = [unique(f"alternating turn {i}") for i in range(5)]
    checkpoints: list[list[bytes]] = []
    with (
        server_process(brain_config(upstream.base_url, db=db), work_a) as a,
        server_process(brain_config(upstream.base_url, db=db), work_b) as b,
    ):
        async with http(a) as client_a, http(b) as client_b:
            for i, prompt in enumerate(prompts):
                run = ShimRun(client_a if i % 2 == 0 else client_b)
                async with run.subscribe() as reader:
                    await run.append(run_request(prompt, conversation))
                    end = await reader.wait_end(20)
                assert end == {} and reader.turn_ended, (i, end)
                # the checkpoint lists every turn so far, the other process's included
                published = [
                    list(m.conversation_checkpoint_update.turns)
                    for _, m in reader.events
                    if m.HasField("conversation_checkpoint_update")
                ]
                assert len(published) == 1 and len(published[0]) == i + 1, (i, published)
                checkpoints.append(published[0])
        logs = a.log() + b.log()
    assert "changed under this run" not in logs, logs

    messages = history(db, conversation)
    assert [m.text for m in messages if isinstance(m, UserMessage)] == prompts
    assert [m.text for m in messages if isinstance(m, AssistantMessage)] == [
        f"You said: {p}" for p in prompts
    ]
    # The last turn's request carried every earlier turn, in order.
    last = json.loads(requests_with(upstream, prompts[-1])[0].body)
    said = [m["content"] for m in last["messages"] if m["role"] == "user"]
    assert said == prompts

    for earlier, later in itertools.pairwise(checkpoints):
        assert later[: len(earlier)] == earlier  # each extends the one before
    with postgres.reader(db) as conn:
        marks = conn.execute(
            "SELECT turn, blob_id, message_count FROM turn_marks WHERE conversation_id = ? "
            "ORDER BY turn",
            (conversation,),
        ).fetchall()
        assert [(t, bytes(b), n) for t, b, n in marks] == [
            (i + 1, blob, 2 * (i + 1)) for i, blob in enumerate(checkpoints[-1])
        ]
        calls = conn.execute(
            "SELECT call_id, request, request_hash FROM llm_calls WHERE conversation_id = ? "
            "ORDER BY created_at_ms, call_id",
            (conversation,),
        ).fetchall()
        stored = {row[0]: bytes(row[1]) for row in calls}

        async def fetch(call_id: str) -> bytes | None:
            return stored.get(call_id)

        assert len(calls) == len(prompts)
        assert sum(is_delta(data) for data in stored.values()) >= 2  # each process made some
        for (_, data, request_hash), prompt in zip(calls, prompts, strict=True):
            rebuilt = await load_request(bytes(data), request_hash, fetch)
            assert rebuilt.body == requests_with(upstream, prompt)[0].body
