"""A person's dashboard lists are filtered by owner in the store's queries (issue 25's
leftover): the dashboard opened with a person's token shows their own latest conversations,
runs and calls however many the others made since. Before, each list was filtered from the
server's latest 1,000 items, so another person's 1,000 newer items hid all of one's own.
Both backends, through `dashboard_data` as the dashboard's route calls it."""

from __future__ import annotations

import itertools

from cursor_byok.observability.dashboard import MAX_LIMIT, dashboard_data
from cursor_byok.store import AnyStore
from cursor_byok.store.api import RunOutcomeRecord

from ..observability.helpers import planted_config
from .conftest import call_record, open_with_clock
from .test_access_tokens import token

NOW = 1_800_000_000_000
OTHERS = MAX_LIMIT + 5  # bob's newer conversations, each with one run and one call


async def chat(store: AnyStore, n: int, owner: str, at: int) -> None:
    """Conversation `owner`-`n`: one commit with one call under `owner`'s token, one run."""
    cid = f"{owner}-{n}"
    call = call_record(
        f"{cid}:call", cid, token_id=owner, status="committed", cost_usd=0.001, created_at_ms=at
    )
    result = await store.commit_input(
        cid,
        input_id="in",
        expected_version=0,
        state=b"s",
        append_messages=(),
        expected_message_count=0,
        result=b"r",
        llm_calls=(call,),
        owner=owner,
    )
    assert result.status == "committed", result
    outcome = RunOutcomeRecord(
        request_id=f"{cid}:run", conversation_id=cid, outcome="ok", finished_at_ms=at
    )
    await store.save_run_outcome(outcome)


async def test_a_persons_own_items_show_past_another_persons_thousand_newer(
    database: str,
) -> None:
    ticks = itertools.count(NOW)
    store = await open_with_clock(database, lambda: next(ticks))
    try:
        await store.add_access_token(token("alice", "t1"))
        await store.add_access_token(token("bob", "t2"))
        for n in range(3):
            await chat(store, n, "t1", NOW + n)
        for n in range(OTHERS):
            await chat(store, n, "t2", NOW + 10 + n)
        config = planted_config()
        mine = await dashboard_data(store, config, limit=MAX_LIMIT, viewer="t1")
        few = await dashboard_data(store, config, limit=2, viewer="t1")
        everyone = await dashboard_data(store, config, limit=MAX_LIMIT)
    finally:
        await store.close()
    own = ["t1-2", "t1-1", "t1-0"]  # newest first
    assert [c["id"] for c in mine["conversations"]] == own
    assert [r["conversation_id"] for r in mine["runs"]] == own
    assert [c["conversation_id"] for c in mine["llm_calls"]] == own
    # The page is bounded the same way for a person: the latest `limit` of their own.
    assert [c["id"] for c in few["conversations"]] == own[:2]
    assert len(few["runs"]) == len(few["llm_calls"]) == 2
    # The operator's page: the latest MAX_LIMIT of everyone's, none of alice's any more.
    assert len(everyone["conversations"]) == MAX_LIMIT
    assert not any(c["id"].startswith("t1-") for c in everyone["conversations"])
