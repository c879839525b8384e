"""A turn's helper totals (runtime/subagents.py `helper_totals`): the calls of each helper its
Task calls started, from the call's link on. A helper resumed by a later Task call (the same
helper conversation, linked again) counts only its calls since that link: its earlier turns
were counted by the turn whose Task call started them."""

from __future__ import annotations

from pathlib import Path

from cursor_byok.llm.types import Usage
from cursor_byok.store.api import LLMCallRecord, SubagentLink
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime.subagents import helper_totals


def call(call_id: str, at_ms: int, tokens: int, cost: float) -> LLMCallRecord:
    return LLMCallRecord(
        call_id=call_id,
        conversation_id="helper",
        turn_id=f"helper:{call_id}",
        request=b"{}",
        request_hash="0" * 64,
        messages_hash="0" * 64,
        status="committed",
        created_at_ms=at_ms,
        input_tokens=tokens,
        output_tokens=1,
        cost_usd=cost,
    )


def link(tool_call_id: str, at_ms: int) -> SubagentLink:
    return SubagentLink(
        parent_conversation_id="parent",
        parent_tool_call_id=tool_call_id,
        child_conversation_id="helper",
        subagent_type="explore",
        depth=1,
        created_at_ms=at_ms,
    )


async def test_a_resumed_helpers_earlier_calls_are_not_counted_again(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "db")
    await store.commit_input(  # the helper's conversation, whose calls these are
        "helper",
        input_id="i0",
        expected_version=0,
        state=b"s",
        append_messages=(),
        expected_message_count=0,
        result=b"r",
    )
    await store.save_subagent_link(link("task_1", 100))
    await store.save_llm_call(call("first", 150, 10, 1.0))  # the helper's first run
    await store.save_subagent_link(link("task_2", 200))  # resumed by a later Task call
    await store.save_llm_call(call("second", 250, 20, 2.0))
    assert await helper_totals(store, "parent", ["task_2"]) == (Usage(input=20, output=1), 2.0)
    assert await helper_totals(store, "parent", ["unknown"]) == (Usage(), 0.0)
    await store.close()
