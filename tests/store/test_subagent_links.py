"""The helper links (migration 0007): one child per parent Task call, read back by the call
and listed per parent."""

from __future__ import annotations

from cursor_byok.store.api import SubagentLink
from cursor_byok.store.backends import open_store


def link(call: str, child: str, at: int) -> SubagentLink:
    return SubagentLink(
        parent_conversation_id="parent",
        parent_tool_call_id=call,
        child_conversation_id=child,
        subagent_type="explore",
        depth=1,
        created_at_ms=at,
    )


async def test_the_first_child_of_a_call_wins_and_survives_a_reopen(database: str) -> None:
    async with await open_store(database) as store:
        assert (await store.save_subagent_link(link("call_1", "child-a", 10))).outcome == (
            "inserted"
        )
        assert (await store.save_subagent_link(link("call_1", "child-a", 11))).outcome == (
            "unchanged"
        )
        second = await store.save_subagent_link(link("call_1", "child-b", 12))
        assert second.outcome == "ignored"
        await store.save_subagent_link(link("call_2", "child-c", 20))
    async with await open_store(database) as store:
        assert await store.find_subagent_link("parent", "call_1") == link("call_1", "child-a", 10)
        assert await store.find_subagent_link("parent", "call_9") is None
        assert await store.list_subagent_links("parent") == (
            link("call_1", "child-a", 10),
            link("call_2", "child-c", 20),
        )
        assert await store.list_subagent_links("other") == ()
