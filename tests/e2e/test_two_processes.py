"""Two server processes on one database file, one conversation: the version CAS decides. A run
that loses the race reloads, sees the conversation continued elsewhere and ends canceled; the
history holds exactly one answer, never two appends for one turn."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from cursor_byok.llm import canonical
from cursor_byok.llm.types import AssistantMessage, UserMessage
from tests.e2e.test_shim import ShimRun, http, is_text, run_request, unique
from tests.support.live import brain_config, server_process
from tests.support.upstream import FakeUpstream


def history(db: Path, conversation_id: str) -> list[object]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT seq, body FROM messages WHERE conversation_id = ? ORDER BY seq",
            (conversation_id,),
        ).fetchall()
    finally:
        conn.close()
    assert [r[0] for r in rows] == list(range(len(rows)))  # no gaps, no duplicates
    return [canonical.decode_message(bytes(r[1])) for r in rows]


async def test_a_run_that_loses_the_race_keeps_nothing(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    db = tmp_path / "shared.db"
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
