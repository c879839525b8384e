"""Non-durable commits on the caller's thread (docs/store.md, "Inline writes"): only when
the writer thread has nothing queued or under way, never waiting for another process's
write lock, never for a large write, in order, with SQLite's checkpoints run by the thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from cursor_byok.store import SQLiteStore
from cursor_byok.store.errors import StoreError
from cursor_byok.store.sqlite import writer as writer_module


async def commit(
    store: SQLiteStore, cid: str, *, durable: bool = False, body: bytes = b"m", version: int = 0
) -> str:
    result = await store.commit_input(
        cid,
        input_id=f"i{version}",
        expected_version=version,
        state=b"s",
        append_messages=[body],
        expected_message_count=version,
        result=b"",
        durable=durable,
    )
    return result.status


@pytest.fixture
async def store(tmp_path: Path) -> SQLiteStore:
    s = await SQLiteStore.open(tmp_path / "store.db")
    yield s  # type: ignore[misc]
    await s.close()


async def test_a_non_durable_commit_runs_on_the_callers_thread(store: SQLiteStore) -> None:
    seen: list[int] = []
    original = writer_module.Writer._commit

    def spying(self, conn, jobs, begun=False):  # type: ignore[no-untyped-def]
        seen.append(threading.get_ident())
        return original(self, conn, jobs, begun)

    writer_module.Writer._commit = spying  # type: ignore[method-assign]
    try:
        assert await commit(store, "quick") == "committed"
        assert await commit(store, "safe", durable=True) == "committed"
    finally:
        writer_module.Writer._commit = original  # type: ignore[method-assign]
    here = threading.get_ident()
    assert seen[0] == here and seen[1] != here  # the durable one went to the writer thread
    stats = store.stats()
    assert stats.inline_writes == 1 and stats.synced_batches == 1
    record = await store.load("quick")
    assert record is not None and record.messages == (b"m",)


async def test_a_large_commit_goes_to_the_thread(store: SQLiteStore) -> None:
    body = b"x" * (writer_module.INLINE_BYTES + 1)
    assert await commit(store, "big", body=body) == "committed"
    assert store.stats().inline_writes == 0
    record = await store.load("big")
    assert record is not None and record.messages == (body,)


async def test_writes_asked_for_earlier_commit_first(store: SQLiteStore) -> None:
    """While the thread has a write under way (held here), a non-durable commit queues
    behind it instead of overtaking it."""
    entered, release = threading.Event(), threading.Event()
    original = writer_module.Writer._commit

    def holding(self, conn, jobs, begun=False):  # type: ignore[no-untyped-def]
        if not begun and any(job.durable for job in jobs):
            entered.set()
            release.wait(10)
        return original(self, conn, jobs, begun)

    writer_module.Writer._commit = holding  # type: ignore[method-assign]
    try:
        first = asyncio.ensure_future(commit(store, "c", durable=True))
        await asyncio.to_thread(entered.wait, 10)
        second = asyncio.ensure_future(commit(store, "c", version=1, body=b"m2"))
        await asyncio.sleep(0.05)
        assert not first.done() and not second.done()  # queued behind the first, not inline
        release.set()
        assert await first == "committed" and await second == "committed"
    finally:
        writer_module.Writer._commit = original  # type: ignore[method-assign]
    assert store.stats().inline_writes == 0
    record = await store.load("c")
    assert record is not None and record.messages == (b"m", b"m2") and record.version == 2


async def test_a_commit_queued_before_is_not_overtaken(store: SQLiteStore) -> None:
    """A durable commit queued for the thread, then at once (the thread not yet awake) a
    non-durable one that follows it: the second waits for the first instead of running
    inline before it (which would find the conversation not there yet)."""
    for round in range(20):
        cid = f"c{round}"
        first = asyncio.ensure_future(commit(store, cid, durable=True))
        second = asyncio.ensure_future(commit(store, cid, version=1, body=b"m2"))
        assert await first == "committed" and await second == "committed"
        record = await store.load(cid)
        assert record is not None and record.messages == (b"m", b"m2")


async def test_another_processs_write_lock_is_waited_for_on_the_thread(
    store: SQLiteStore, tmp_path: Path
) -> None:
    other = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # what another server holds while it commits
    loop = asyncio.get_running_loop()
    started = loop.time()
    pending = asyncio.ensure_future(commit(store, "c"))
    await asyncio.sleep(0.1)
    assert loop.time() - started < 0.5  # the loop was not blocked meanwhile
    assert not pending.done()
    other.execute("COMMIT")
    other.close()
    assert await pending == "committed"
    assert store.stats().inline_writes == 0


async def test_an_inline_commit_that_fails_is_rolled_back_and_says_why(
    store: SQLiteStore,
) -> None:
    assert await commit(store, "c") == "committed"
    with pytest.raises(StoreError, match="append-only"):
        await store.commit_input(  # a message count that the stored one contradicts
            "c",
            input_id="i9",
            expected_version=1,
            state=b"s2",
            append_messages=[b"x"],
            expected_message_count=5,
            result=b"",
            durable=False,
        )
    assert await commit(store, "c", version=1, body=b"m2") == "committed"
    record = await store.load("c")
    assert record is not None and record.messages == (b"m", b"m2")
    assert store.stats().inline_writes == 3  # the failed one too


async def test_the_thread_checkpoints_the_wal(
    store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "CHECKPOINT_EVERY", 5)
    for round in (1, 2):
        for n in range(6):
            assert await commit(store, f"c{round}-{n}") == "committed"
        for _ in range(200):  # the thread runs it once the inline commit made it due
            if store.stats().checkpoints >= round:
                break
            await asyncio.sleep(0.01)
        assert store.stats().checkpoints == round
    check = sqlite3.connect(tmp_path / "store.db")
    try:
        assert check.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000  # its own
        # What the checkpoints copied is in the database file: readable without the WAL.
        assert check.execute("SELECT count(*) FROM conversations").fetchone()[0] == 12
    finally:
        check.close()
