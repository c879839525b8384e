"""The owner a conversation is created with, and the budget reservation a commit carries: one
atomic step, refused without changing anything when spent + reserved + amount exceeds the
budget or the rate window is full; a finished call counts its cost in place of its
reservation. Both backends; concurrent commits of one person on PostgreSQL (read committed)
never both take the last room."""

from __future__ import annotations

import asyncio

from cursor_byok.store import AnyStore, open_store
from cursor_byok.store.api import Reservation

from .conftest import call_record
from .test_access_tokens import token

MONTH = (0, 1_000_000)


def reserve(amount: float, budget: float | None = 1.0, **kw: object) -> Reservation:
    values: dict[str, object] = {
        "token_id": "t1",
        "amount_usd": amount,
        "budget_usd": budget,
        "since_ms": MONTH[0],
        "until_ms": MONTH[1],
    }
    values.update(kw)
    return Reservation(**values)  # type: ignore[arg-type]


async def plan(
    store: AnyStore, cid: str, call_id: str, amount: float, *, at: int = 1000, **kw: object
) -> object:
    call = call_record(call_id, cid, token_id="t1", reserved_usd=amount, created_at_ms=at)
    return await store.commit_input(
        cid,
        input_id=call_id,
        expected_version=0,
        state=b"s",
        append_messages=(),
        expected_message_count=0,
        result=b"r",
        llm_calls=(call,),
        owner="t1",
        reserve=reserve(amount, **kw),
    )


async def test_a_new_conversation_keeps_its_owner(store: AnyStore) -> None:
    await store.add_access_token(token("alice", "t1"))
    result = await plan(store, "c1", "k1", 0.1)
    assert result.status == "committed"  # type: ignore[attr-defined]
    head = await store.head("c1")
    record = await store.load("c1")
    assert head is not None and head.owner_id == "t1"
    assert record is not None and record.owner_id == "t1"


async def test_reservations_fill_the_budget_and_settle_to_the_cost(store: AnyStore) -> None:
    await store.add_access_token(token("alice", "t1", budget_usd=1.0))
    for n in range(4):
        result = await plan(store, f"c{n}", f"k{n}", 0.25)
        assert result.status == "committed", (n, result)  # type: ignore[attr-defined]
    refused = await plan(store, "c9", "k9", 0.25)
    assert refused.status == "refused"  # type: ignore[attr-defined]
    totals = refused.reservation  # type: ignore[attr-defined]
    assert (totals.spent_usd, totals.reserved_usd, totals.refused_by) == (0.0, 1.0, "budget")
    assert await store.head("c9") is None  # nothing of the refused commit was written
    assert await store.get_llm_call("k9") is None
    # k0 finishes costing $0.05: its reservation gives way to its cost.
    done = call_record(
        "k0", "c0", token_id="t1", reserved_usd=0.25, status="committed", cost_usd=0.05
    )
    await store.save_llm_call(done)
    again = await plan(store, "c9", "k9", 0.2)
    assert again.status == "committed"  # type: ignore[attr-defined]
    totals = again.reservation  # type: ignore[attr-defined]
    assert totals.spent_usd == 0.05 and abs(totals.reserved_usd - 0.75) < 1e-9
    # Another month's calls never count.
    assert (await plan(store, "c8", "k8", 0.9, since_ms=MONTH[1] - 1)).status == "committed"  # type: ignore[attr-defined]


async def test_the_rate_window_counts_the_persons_planned_calls(store: AnyStore) -> None:
    await store.add_access_token(token("alice", "t1", rpm=2))
    rate = {"budget": None, "rpm": 2, "rate_since_ms": 900}
    assert (await plan(store, "c1", "k1", 0.0, **rate)).status == "committed"  # type: ignore[attr-defined]
    assert (await plan(store, "c2", "k2", 0.0, **rate)).status == "committed"  # type: ignore[attr-defined]
    third = await plan(store, "c3", "k3", 0.0, **rate)
    assert third.status == "refused"  # type: ignore[attr-defined]
    assert third.reservation.refused_by == "rate"  # type: ignore[attr-defined]
    later = {**rate, "rate_since_ms": 1001}  # a minute on: the two calls are out of it
    assert (await plan(store, "c3", "k3", 0.0, at=2000, **later)).status == "committed"  # type: ignore[attr-defined]


async def test_concurrent_reservations_never_both_take_the_last_room(database: str) -> None:
    """48 commits at once from six stores (each a pool of connections on PostgreSQL), room
    for three."""
    stores = [await open_store(database) for _ in range(6)]
    try:
        await stores[0].add_access_token(token("alice", "t1", budget_usd=0.75))
        results = await asyncio.gather(
            *(plan(stores[n % 6], f"c{n}", f"k{n}", 0.25, budget=0.75) for n in range(48))
        )
        statuses = [r.status for r in results]  # type: ignore[attr-defined]
        assert statuses.count("committed") == 3, statuses
        assert statuses.count("refused") == 45, statuses
    finally:
        for s in stores:
            await s.close()


async def test_a_call_planned_again_replaces_its_reservation_and_counts_its_cost(
    store: AnyStore,
) -> None:
    """A call resumed after a restart is planned again through reserve_llm_call: its earlier
    reservation never counts beside the new one, what its earlier attempt cost does, and it
    counts from when it is planned again (its created_at_ms moves)."""
    await store.add_access_token(token("alice", "t1", budget_usd=1.0))
    assert (await plan(store, "c1", "k1", 0.6)).status == "committed"  # type: ignore[attr-defined]
    again = call_record("k1", "c1", token_id="t1", reserved_usd=0.6, created_at_ms=5000)
    totals = await store.reserve_llm_call(again, reserve(0.6))
    assert totals.refused_by is None and totals.reserved_usd == 0.0, totals
    stored = await store.get_llm_call("k1")
    assert stored is not None and stored.created_at_ms == 5000
    # Its attempt ended costing $0.5: planning it again for $0.6 passes the budget.
    ended = call_record(
        "k1",
        "c1",
        token_id="t1",
        reserved_usd=0.6,
        status="canceled",
        cost_usd=0.5,
        created_at_ms=5000,
    )
    await store.save_llm_call(ended)
    later = call_record("k1", "c1", token_id="t1", reserved_usd=0.6, created_at_ms=6000)
    totals = await store.reserve_llm_call(later, reserve(0.6))
    assert totals.refused_by == "budget" and totals.spent_usd == 0.5, totals
