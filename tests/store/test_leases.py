"""Process leases and the "planned" calls they own (migration 0010), on both backends: a
lease is kept and renewed, the owners of planned calls are listed with their leases, a taker
moves only the calls of the owners it names (never another's), atomically, and old leases
that own nothing are pruned."""

from __future__ import annotations

import asyncio

from cursor_byok.store import AnyStore, open_store
from cursor_byok.store.api import CallOwner, ProcessLease

from .conftest import call_record, commit


def lease(process_id: str, *, expires: int = 10_000, ended: int | None = None) -> ProcessLease:
    return ProcessLease(
        process_id=process_id,
        host="boot-1/ns-1",
        pid=4242,
        pid_started=77,
        started_at_ms=1_000,
        renewed_at_ms=expires - 5_000,
        expires_at_ms=expires,
        ended_at_ms=ended,
    )


async def planned(store: AnyStore, owner: str | None, *call_ids: str) -> None:
    calls = tuple(call_record(c, process_id=owner) for c in call_ids)
    head = await store.head("c1")
    version = head.version if head else 0
    await commit(
        store, "c1", f"in-{call_ids[0]}", version, expected_message_count=0, llm_calls=calls
    )


def by_owner(owners: tuple[CallOwner, ...]) -> list[CallOwner]:
    return sorted(owners, key=lambda o: o.process_id or "")


async def test_a_lease_is_saved_renewed_and_listed_with_its_calls(store: AnyStore) -> None:
    assert await store.planned_call_owners() == ()
    await store.save_lease(lease("alive"))
    await store.save_lease(lease("alive", expires=20_000))  # renewed: one row, the new times
    await store.save_lease(lease("dead", expires=9_000))
    await planned(store, "alive", "a1", "a2")
    await planned(store, "dead", "d1")
    await planned(store, None, "old1")  # made before 0010: no owner
    await planned(store, "vanished", "v1")  # an owner without a lease row
    await store.save_llm_call(call_record("a3", process_id="alive", status="committed"))
    assert by_owner(await store.planned_call_owners()) == [
        CallOwner(process_id=None, calls=1),
        CallOwner(process_id="alive", calls=2, lease=lease("alive", expires=20_000)),
        CallOwner(process_id="dead", calls=1, lease=lease("dead", expires=9_000)),
        CallOwner(process_id="vanished", calls=1),
    ]


async def test_a_taker_gets_only_the_calls_of_the_owners_it_names(store: AnyStore) -> None:
    await planned(store, "alive", "a1")
    await planned(store, "dead", "d1", "d2")
    await planned(store, None, "old1")
    taken = await store.take_planned_calls("me", ["dead", None])
    assert [(r.call_id, r.process_id, r.status) for r in taken] == [
        ("d1", "me", "planned"),
        ("d2", "me", "planned"),
        ("old1", "me", "planned"),
    ]
    assert taken[0] == call_record("d1", process_id="me")  # the whole record, as stored now
    assert (await store.get_llm_call("a1")).process_id == "alive"  # type: ignore[union-attr]
    assert await store.take_planned_calls("me", ["dead", None]) == ()  # nothing left of theirs
    assert await store.take_planned_calls("me", []) == ()
    owners = await store.planned_call_owners()
    assert sorted((o.process_id or "", o.calls) for o in owners) == [("alive", 1), ("me", 3)]


async def test_two_takers_of_one_dead_owner_never_share_a_call(database: str) -> None:
    first, second = await open_store(database), await open_store(database)
    try:
        await planned(first, "dead", *(f"d{i}" for i in range(40)))
        a, b = await asyncio.gather(
            first.take_planned_calls("p1", ["dead"]), second.take_planned_calls("p2", ["dead"])
        )
        ids_a, ids_b = {r.call_id for r in a}, {r.call_id for r in b}
        assert not ids_a & ids_b
        assert ids_a | ids_b == {f"d{i}" for i in range(40)}
    finally:
        await first.close()
        await second.close()


async def test_old_leases_that_own_nothing_are_pruned(store: AnyStore) -> None:
    await store.save_lease(lease("ended", expires=50_000, ended=2_000))
    await store.save_lease(lease("expired-owner", expires=3_000))
    await store.save_lease(lease("expired", expires=3_000))
    await store.save_lease(lease("recent", expires=90_000))
    await planned(store, "expired-owner", "e1")
    assert await store.prune_leases(10_000) == 2  # "ended" and "expired"
    assert await store.prune_leases(10_000) == 0
    owners = await store.planned_call_owners()
    assert owners == (
        CallOwner(process_id="expired-owner", calls=1, lease=lease("expired-owner", expires=3_000)),
    )
