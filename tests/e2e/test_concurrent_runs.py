"""Inputs of one conversation enter the loop one at a time: a second run of the same
conversation supersedes (cancels) the first, and the history stays a clean sequence."""

from __future__ import annotations

import sqlite3
import uuid

from cursor_byok.llm import canonical
from cursor_byok.llm.types import AssistantMessage, ToolResultMessage, UserMessage
from tests.e2e.test_shim import ShimRun, http, is_text, run_request, unique
from tests.support.live import ServerProcess


def messages(server: ServerProcess, conversation_id: str) -> list[object]:
    path = server.log_path.parent / "byok.db"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT body FROM messages WHERE conversation_id = ? ORDER BY seq", (conversation_id,)
        ).fetchall()
    finally:
        conn.close()
    return [canonical.decode_message(bytes(r[0])) for r in rows]


async def test_second_run_supersedes_the_first(server: ServerProcess) -> None:
    conversation = str(uuid.uuid4())
    slow = unique("[slow 4] first message")
    fast = unique("second message")
    async with http(server) as client:
        first = ShimRun(client)
        second = ShimRun(client)
        async with first.subscribe() as r1:
            await first.append(run_request(slow, conversation))
            await r1.wait_for(is_text)
            async with second.subscribe() as r2:
                await second.append(run_request(fast, conversation))
                end2 = await r2.wait_end(20)
            end1 = await r1.wait_end(20)
    assert end1["error"]["code"] == "canceled", end1
    assert end2 == {} and r2.turn_ended
    assert "".join(r2.texts) == f"You said: {fast}"
    history = messages(server, conversation)
    kinds = [type(m) for m in history]
    # first turn: its user message, never a half answer; second turn: user + full answer
    assert kinds == [UserMessage, UserMessage, AssistantMessage], history
    assert not any(isinstance(m, ToolResultMessage) for m in history)
    assert isinstance(history[-1], AssistantMessage)
    assert history[-1].text == f"You said: {fast}"
