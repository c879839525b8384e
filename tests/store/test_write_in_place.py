"""Non-durable writes on the event loop's thread (docs/store.md, "Writes in place")."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from cursor_byok.store import SQLiteStore
from cursor_byok.store.errors import StoreFullError, StoreIntegrityError

from .conftest import write_lock


async def _commit(
    store: SQLiteStore,
    cid: str,
    *,
    durable: bool,
    version: int = 0,
    messages: tuple[bytes, ...] = (b"m",),
    count: int | None = None,
    input_id: str | None = None,
) -> str:
    result = await store.commit_input(
        cid,
        input_id=input_id or f"i{version}",
        expected_version=version,
        state=b"s",
        append_messages=list(messages),
        expected_message_count=version if count is None else count,
        result=b"",
        durable=durable,
    )
    return result.status


async def test_an_idle_writer_lets_a_non_durable_write_run_in_place(store: SQLiteStore) -> None:
    before = store.stats()
    assert await _commit(store, "quick", durable=False) == "committed"
    after = store.stats()
    assert after.inline_jobs == before.inline_jobs + 1
    assert after.batches == before.batches  # the writer thread never saw it
    record = await store.load("quick")
    assert record is not None and record.messages == (b"m",) and record.version == 1


async def test_durable_writes_always_go_to_the_writer_thread(store: SQLiteStore) -> None:
    before = store.stats()
    assert await _commit(store, "safe", durable=True) == "committed"
    after = store.stats()
    assert after.inline_jobs == before.inline_jobs
    assert after.batches == before.batches + 1 and after.synced_batches == before.synced_batches + 1


async def test_a_busy_writer_queues_the_write_behind_it(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path)
    try:
        started, release = threading.Event(), threading.Event()

        def slow(conn: object) -> None:  # a durable write the writer thread is busy with
            started.set()
            release.wait(5)

        slow_write = asyncio.ensure_future(store._write(slow, "a slow write"))
        assert await asyncio.to_thread(started.wait, 5)
        before = store.stats()
        quick = asyncio.ensure_future(_commit(store, "queued", durable=False))
        await asyncio.sleep(0.05)
        assert not quick.done()  # it did not run beside the writer's transaction
        release.set()
        await slow_write
        assert await quick == "committed"
        after = store.stats()
        assert after.inline_jobs == before.inline_jobs and after.batches == before.batches + 1
    finally:
        await store.close()


async def test_another_process_holding_the_lock_sends_the_write_to_the_writer(
    db_path: Path,
) -> None:
    store = await SQLiteStore.open(db_path, busy_timeout_ms=5000)
    try:
        before = store.stats()
        with write_lock(db_path):
            pending = asyncio.ensure_future(_commit(store, "waits", durable=False))
            await asyncio.sleep(0.1)
            assert not pending.done()  # queued; the writer thread waits for the lock
        assert await pending == "committed"
        after = store.stats()
        assert after.inline_jobs == before.inline_jobs and after.batches == before.batches + 1
    finally:
        await store.close()


async def test_in_place_errors_are_raised_and_nothing_is_kept(store: SQLiteStore) -> None:
    assert await _commit(store, "c", durable=False) == "committed"
    with pytest.raises(StoreIntegrityError):  # a message count that does not match
        await _commit(store, "c", durable=False, version=1, count=5)
    record = await store.load("c")
    assert record is not None and record.version == 1 and record.messages == (b"m",)
    assert await store.find_input_commit("c", "i1") is None
    # a conflict is an answer, not an error; the store goes on writing in place
    assert await _commit(store, "c", durable=False, version=7, input_id="x") == "conflict"
    assert await _commit(store, "c", durable=False, version=1) == "committed"


async def test_the_size_limit_holds_for_writes_in_place(store: SQLiteStore, db_path: Path) -> None:
    assert await _commit(store, "c", durable=False) == "committed"
    size = os.path.getsize(db_path) + os.path.getsize(str(db_path) + "-wal")
    await store.set_size_limit(size + 8192)
    before = store.stats().inline_jobs
    with pytest.raises(StoreFullError):
        await _commit(store, "c", durable=False, version=1, messages=(os.urandom(256 * 1024),))
    assert store.stats().inline_jobs == before
    record = await store.load("c")
    assert record is not None and record.version == 1
    await store.set_size_limit(None)
    assert await _commit(store, "c", durable=False, version=1, messages=(b"x" * 300_000,)) == (
        "committed"
    )


async def test_writes_in_place_can_be_turned_off(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path, inline_writes=False)
    try:
        assert await _commit(store, "c", durable=False) == "committed"
        stats = store.stats()
        assert stats.inline_jobs == 0 and stats.batches >= 1
    finally:
        await store.close()


async def test_writes_from_many_tasks_interleave_safely(store: SQLiteStore) -> None:
    """In place and on the writer thread at once, over many conversations: every commit lands
    exactly once and versions stay consecutive."""

    async def conversation(n: int) -> None:
        for version in range(6):
            durable = (n + version) % 3 == 0
            assert await _commit(store, f"c{n}", durable=durable, version=version) == "committed"

    t0 = time.monotonic()
    await asyncio.gather(*(conversation(n) for n in range(40)))
    assert time.monotonic() - t0 < 30
    for n in range(40):
        record = await store.load(f"c{n}")
        assert record is not None and record.version == 6 and len(record.messages) == 6
    stats = store.stats()
    assert stats.inline_jobs > 0 and stats.batches > 0
