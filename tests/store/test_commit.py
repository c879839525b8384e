"""commit_input: atomicity, dedupe, compare-and-swap, append-only history, timestamps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cursor_byok.store import (
    AnyStore,
    RecordMismatchError,
    SQLiteStore,
    StoreIntegrityError,
)

from .conftest import call_record, commit, operation_record, wait_for_batch, write_lock


async def test_first_commit_creates_the_conversation(store: AnyStore) -> None:
    assert await store.load("c1") is None
    r = await commit(store, "c1", "i0", 0, (b"m0",), state=b"S1")
    assert (r.status, r.version, r.previous) == ("committed", 1, None)
    rec = await store.load("c1")
    assert rec is not None
    assert (rec.version, rec.state, rec.messages) == (1, b"S1", (b"m0",))
    found = await store.find_input_commit("c1", "i0")
    assert found is not None
    assert (found.committed_version, found.result) == (1, b"result:i0")
    assert await store.find_input_commit("c1", "nope") is None


async def test_commit_costs_new_messages_only_and_keeps_order(store: AnyStore) -> None:
    await commit(store, "c1", "i0", 0, (b"a", b"b"), 0)
    await commit(store, "c1", "i1", 1, (b"c",), 2)
    await commit(store, "c1", "i2", 2, (), 3)
    rec = await store.load("c1")
    assert rec is not None
    assert rec.version == 3
    assert rec.messages == (b"a", b"b", b"c")


async def test_replayed_input_returns_recorded_result_and_changes_nothing(
    store: AnyStore,
) -> None:
    await commit(store, "c1", "req-1:0", 0, (b"m0",), result=b"R0")
    await commit(store, "c1", "req-1:1", 1, (b"m1",), result=b"R1")
    before = await store.load("c1")
    # Same input id again, even with a current expected version and new payload.
    r = await commit(store, "c1", "req-1:0", 2, (b"other",), result=b"other")
    assert r.status == "duplicate"
    assert r.version == 2
    assert r.previous is not None
    assert (r.previous.committed_version, r.previous.result) == (1, b"R0")
    assert await store.load("c1") == before


async def test_stale_version_is_a_conflict_and_changes_nothing(store: AnyStore) -> None:
    await commit(store, "c1", "i0", 0, (b"m0",))
    await commit(store, "c1", "i1", 1, (b"m1",))
    before = await store.load("c1")
    r = await commit(store, "c1", "i2", 1, (b"late",), 1)
    assert (r.status, r.version) == ("conflict", 2)
    r0 = await commit(store, "c1", "i3", 0, (b"late",), 0)
    assert (r0.status, r0.version) == ("conflict", 2)
    missing = await commit(store, "nope", "i", 5, (), 5)
    assert (missing.status, missing.version) == ("conflict", 0)
    assert await store.load("c1") == before
    assert await store.find_input_commit("c1", "i2") is None


async def test_state_only_commits_from_the_same_version_conflict(
    store: AnyStore, db_path: Path
) -> None:
    """The compare-and-set is on the version itself: two commits that append nothing (the
    message count does not tell them apart) from the same version cannot both go through."""
    await commit(store, "c1", "i0", 0, (b"m0",), state=b"S1")
    first = await commit(store, "c1", "a", 1, (), 1, state=b"A")
    assert (first.status, first.version) == ("committed", 2)
    second = await commit(store, "c1", "b", 1, (), 1, state=b"B")
    assert (second.status, second.version) == ("conflict", 2)
    rec = await store.load("c1")
    assert rec is not None and (rec.version, rec.state, rec.messages) == (2, b"A", (b"m0",))
    assert await store.find_input_commit("c1", "b") is None

    # the same two in one batch (one transaction, a savepoint each)
    base = store.stats().batches
    with write_lock(db_path):
        blocker = asyncio.create_task(commit(store, "w", "w0", 0))
        await wait_for_batch(store, base)
        c = asyncio.create_task(commit(store, "c1", "c", 2, (), 1, state=b"C"))
        d = asyncio.create_task(commit(store, "c1", "d", 2, (), 1, state=b"D"))
        await asyncio.sleep(0.05)
    assert (await blocker).status == "committed"
    assert ((await c).status, (await d).status) == ("committed", "conflict")
    assert store.stats().batches - base == 2
    rec = await store.load("c1")
    assert rec is not None and (rec.version, rec.state, rec.messages) == (3, b"C", (b"m0",))

    # two first commits of a conversation, neither with a message
    assert (await commit(store, "c2", "x", 0, (), 0)).status == "committed"
    again = await commit(store, "c2", "y", 0, (), 0, state=b"other")
    assert (again.status, again.version) == ("conflict", 1)


async def test_created_at_is_the_first_commit_and_updated_at_the_last(db_path: Path) -> None:
    now = [1_000]
    s = await SQLiteStore.open(db_path, clock=lambda: now[0])
    try:

        async def times() -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
            rec, head = await s.load("c1"), await s.head("c1")
            assert rec is not None and head is not None
            (listed,) = [c for c in await s.list_conversations() if c.conversation_id == "c1"]
            return (
                (rec.created_at_ms, rec.updated_at_ms),
                (head.created_at_ms, head.updated_at_ms),
                (listed.created_at_ms, listed.updated_at_ms),
            )

        await commit(s, "c1", "i0", 0, (b"m0",))
        assert await times() == ((1_000, 1_000),) * 3
        now[0] = 2_000
        await commit(s, "c1", "i1", 1, (), 1)  # a state-only commit moves it too
        assert await times() == ((1_000, 2_000),) * 3
        now[0] = 3_000
        await commit(s, "c1", "i2", 2, (b"m1",), 1)
        assert await times() == ((1_000, 3_000),) * 3
        # what changes nothing moves nothing: a conflict, a duplicate, a failed commit
        now[0] = 4_000
        assert (await commit(s, "c1", "late", 1, (), 1)).status == "conflict"
        assert (await commit(s, "c1", "i2", 3, (), 2)).status == "duplicate"
        with pytest.raises(StoreIntegrityError):
            await commit(s, "c1", "bad", 3, (), 0)
        assert await times() == ((1_000, 3_000),) * 3
        inputs = [await s.find_input_commit("c1", f"i{i}") for i in range(3)]
        assert [i.created_at_ms if i else None for i in inputs] == [1_000, 2_000, 3_000]
    finally:
        await s.close()


async def test_message_count_mismatch_fails_the_commit(store: AnyStore) -> None:
    await commit(store, "c1", "i0", 0, (b"m0", b"m1"), 0)
    before = await store.load("c1")
    with pytest.raises(StoreIntegrityError, match="message count mismatch") as err:
        await commit(store, "c1", "i1", 1, (b"m2",), 1)
    assert str(store.path) in str(err.value)
    with pytest.raises(StoreIntegrityError, match="expected_message_count=0"):
        await commit(store, "c2", "i0", 0, (b"x",), 3)
    assert await store.load("c1") == before
    assert await store.load("c2") is None


async def test_failure_inside_the_transaction_leaves_nothing_visible(
    store: AnyStore,
) -> None:
    await commit(store, "c1", "i0", 0, (b"m0",), llm_calls=(call_record("call-0"),))
    before = await store.load("c1")
    # A valid operation and message, then a call record that breaks a CHECK constraint.
    with pytest.raises(StoreIntegrityError, match="constraint"):
        await commit(
            store,
            "c1",
            "i1",
            1,
            (b"m1",),
            client_operations=(operation_record("op-1"),),
            llm_calls=(call_record("call-1"), call_record("call-2", status="bogus")),
        )
    # Same with an immutable-field violation detected by the store itself.
    with pytest.raises(RecordMismatchError, match="request"):
        await commit(
            store,
            "c1",
            "i1",
            1,
            (b"m1",),
            llm_calls=(call_record("call-0", request=b"different bytes"),),
        )
    assert await store.load("c1") == before
    assert await store.find_input_commit("c1", "i1") is None
    assert await store.get_llm_call("call-1") is None
    assert await store.get_client_operation("op-1") is None
    saved = await store.get_llm_call("call-0")
    assert saved is not None and saved.request == b'{"messages":[]}'
    # and the store carries on
    assert (await commit(store, "c1", "i1", 1, (b"m1",))).status == "committed"


async def test_one_failing_job_does_not_affect_the_rest_of_its_batch(
    store: AnyStore, db_path: Path
) -> None:
    await commit(store, "c1", "i0", 0, (b"m0",))
    base = store.stats().batches
    with write_lock(db_path):
        # The writer takes the first job and waits for the lock; the next three queue up
        # behind it and are committed together in one batch.
        first = asyncio.create_task(commit(store, "w", "w0", 0))
        await wait_for_batch(store, base)
        good_a = asyncio.create_task(commit(store, "a", "a0", 0, (b"a0",)))
        bad = asyncio.create_task(
            commit(store, "c1", "i1", 1, (b"m1",), llm_calls=(call_record("x", status="??"),))
        )
        conflict = asyncio.create_task(commit(store, "c1", "i2", 0, (b"zz",), 0))
        good_b = asyncio.create_task(commit(store, "b", "b0", 0, (b"b0",)))
        await asyncio.sleep(0.05)
    assert (await first).status == "committed"
    assert (await good_a).status == "committed"
    with pytest.raises(StoreIntegrityError):
        await bad
    assert (await conflict).status == "conflict"
    assert (await good_b).status == "committed"
    assert store.stats().batches - base == 2
    assert store.stats().max_batch >= 4
    rec = await store.load("c1")
    assert rec is not None and rec.version == 1 and rec.messages == (b"m0",)
    a = await store.load("a")
    assert a is not None and a.messages == (b"a0",)


async def test_fifty_concurrent_committers_one_winner_per_version(store: AnyStore) -> None:
    tasks_n, wins_each = 50, 2
    winners: dict[int, str] = {}
    conflicts = 0

    async def committer(name: str) -> None:
        nonlocal conflicts
        won = 0
        attempt = 0
        while won < wins_each:
            rec = await store.load("conv")
            version = 0 if rec is None else rec.version
            count = 0 if rec is None else len(rec.messages)
            r = await commit(store, "conv", f"{name}:{attempt}", version, (name.encode(),), count)
            attempt += 1
            if r.status == "committed":
                assert r.version not in winners
                winners[r.version] = name
                won += 1
            else:
                assert r.status == "conflict"
                conflicts += 1

    await asyncio.gather(*(committer(f"t{i}") for i in range(tasks_n)))
    total = tasks_n * wins_each
    assert sorted(winners) == list(range(1, total + 1))
    rec = await store.load("conv")
    assert rec is not None
    assert rec.version == total
    assert rec.messages == tuple(winners[v].encode() for v in range(1, total + 1))
    assert conflicts > 0
    if isinstance(store, SQLiteStore):  # group commit is the SQLite writer's
        assert store.stats().max_batch > 1


async def test_records_in_a_commit_are_saved_with_it(store: AnyStore) -> None:
    call = call_record("call-1")
    op = operation_record("op-1")
    r = await commit(store, "c1", "i0", 0, (b"m0",), llm_calls=(call,), client_operations=(op,))
    assert r.status == "committed" and r.ignored == ()
    assert await store.get_llm_call("call-1") == call
    assert await store.get_client_operation("op-1") == op
    done = operation_record("op-1", status="completed", result=b"ok", updated_at_ms=2000)
    await store.save_client_operation(done)
    again = operation_record("op-1", status="completed", result=b"other", updated_at_ms=3000)
    r2 = await commit(store, "c1", "i1", 1, (b"m1",), client_operations=(again,))
    assert r2.status == "committed" and r2.ignored == ("op-1",)
    assert await store.get_client_operation("op-1") == done


async def test_cancelled_caller_does_not_break_the_writer(store: AnyStore) -> None:
    task = asyncio.create_task(commit(store, "c1", "i0", 0, (b"m0",)))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The write may or may not have happened. Writes run in order, so once a later write has
    # returned the cancelled one is settled too, and find_input_commit tells which way.
    await commit(store, "other", "o0", 0)
    done = await store.find_input_commit("c1", "i0")
    expected = 0 if done is None else 1
    r = await commit(store, "c1", "i1", expected, (b"m1",))
    assert r.status == "committed"


async def test_closed_store_refuses_calls(db_path: Path) -> None:
    from cursor_byok.store import StoreClosedError

    s = await SQLiteStore.open(db_path)
    await commit(s, "c1", "i0", 0, (b"m0",))
    await s.close()
    await s.close()
    with pytest.raises(StoreClosedError):
        await s.load("c1")
    with pytest.raises(StoreClosedError):
        await commit(s, "c1", "i1", 1)
    async with await SQLiteStore.open(db_path) as s2:
        rec = await s2.load("c1")
        assert rec is not None and rec.messages == (b"m0",)


async def test_the_same_input_sent_twice_at_once_commits_once_and_is_a_duplicate_once(
    store: AnyStore,
) -> None:
    """Two commits of one input id racing (a client's retry reaching another replica): one is
    committed, the other is a duplicate with the first one's result, never a conflict. On
    PostgreSQL both may miss the first dedupe look; the loser of the compare-and-set looks
    again."""
    for i in range(20):
        cid = f"twice-{i}"
        await commit(store, cid, "i0", 0, (b"m0",))
        a, b = await asyncio.gather(
            commit(store, cid, "again", 1, (b"m1",), result=b"R"),
            commit(store, cid, "again", 1, (b"m1",), result=b"R"),
        )
        assert sorted((a.status, b.status)) == ["committed", "duplicate"], (i, a, b)
        dup = a if a.status == "duplicate" else b
        assert dup.previous is not None and dup.previous.result == b"R"
        rec = await store.load(cid)
        assert rec is not None and rec.messages == (b"m0", b"m1") and rec.version == 2
