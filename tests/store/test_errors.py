"""Disk full, database locked, corrupt file: a clear StoreError, no partial commit, the store
stays usable once the cause is gone."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

from cursor_byok.store import (
    AnyStore,
    SQLiteStore,
    StoreCorruptError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
)

from .conftest import commit, wait_for_batch, write_lock


async def test_disk_full_fails_the_batch_and_recovers(store: AnyStore, db_path: Path) -> None:
    await commit(store, "c1", "i0", 0, (b"m0",))
    before = await store.load("c1")
    size = os.path.getsize(db_path) + os.path.getsize(str(db_path) + "-wal")
    await store.set_size_limit(size + 8192)
    big = os.urandom(256 * 1024)
    with pytest.raises(StoreFullError) as err:
        await commit(store, "c1", "i1", 1, (big,))
    text = str(err.value)
    assert str(db_path) in text and "full" in text and "nothing of this batch" in text
    assert await store.load("c1") == before
    assert await store.find_input_commit("c1", "i1") is None

    # Every job of a batch that hits SQLITE_FULL gets the error, even a small one.
    base = store.stats().batches
    with write_lock(db_path):
        first = asyncio.create_task(commit(store, "w", "w0", 0))
        await wait_for_batch(store, base)
        huge = asyncio.create_task(commit(store, "c1", "i1", 1, (big,)))
        small = asyncio.create_task(commit(store, "s", "s0", 0, (b"s",)))
        await asyncio.sleep(0.05)
    assert (await first).status == "committed"
    results = await asyncio.gather(huge, small, return_exceptions=True)
    assert all(isinstance(r, StoreFullError) for r in results)
    assert await store.load("s") is None

    # the cause goes away: the same store commits again
    await store.set_size_limit(None)
    r = await commit(store, "c1", "i1", 1, (big,))
    assert (r.status, r.version) == ("committed", 2)
    rec = await store.load("c1")
    assert rec is not None and rec.messages == (b"m0", big)


async def test_locked_database_is_a_clear_error_and_recovers(db_path: Path) -> None:
    s = await SQLiteStore.open(db_path, busy_timeout_ms=100)
    try:
        await commit(s, "c1", "i0", 0, (b"m0",))
        with write_lock(db_path):
            with pytest.raises(StoreLockedError) as err:
                await commit(s, "c1", "i1", 1, (b"m1",))
            text = str(err.value)
            assert str(db_path) in text and "locked" in text and "busy_timeout=100" in text
            # reads are not blocked by a writer under WAL
            rec = await s.load("c1")
            assert rec is not None and rec.version == 1
        assert await s.find_input_commit("c1", "i1") is None
        r = await commit(s, "c1", "i1", 1, (b"m1",))
        assert (r.status, r.version) == ("committed", 2)
    finally:
        await s.close()


async def test_garbage_file_is_refused_at_open(db_path: Path) -> None:
    db_path.write_bytes(b"this is not sqlite " * 500)
    with pytest.raises(StoreCorruptError) as err:
        await SQLiteStore.open(db_path)
    text = str(err.value)
    assert str(db_path) in text and "not a database" in text


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("missing/dir/byok.db", "the directory '{root}/missing/dir' does not exist"),
        ("", "the path is a directory"),
        ("a-file/byok.db", "'{root}/a-file' is not a directory"),
    ],
)
async def test_a_path_that_cannot_be_opened_says_why(
    tmp_path: Path, where: str, reason: str
) -> None:
    (tmp_path / "a-file").write_text("x")
    path = tmp_path / where if where else tmp_path
    with pytest.raises(StoreIOError) as err:
        await SQLiteStore.open(path)
    assert str(err.value).startswith(f"{path}: {reason.format(root=tmp_path)}")


async def test_garbage_in_a_page_is_an_error_on_read_not_a_crash(db_path: Path) -> None:
    s = await SQLiteStore.open(db_path)
    body = os.urandom(400)
    await commit(s, "c1", "i0", 0, tuple(body for _ in range(300)), 0)
    await commit(s, "other", "i0", 0)
    await s.close()  # checkpoints the WAL into the main file
    conn = sqlite3.connect(db_path)
    root, page_size = conn.execute(
        "SELECT rootpage, (SELECT page_size FROM pragma_page_size()) FROM sqlite_master "
        "WHERE name = 'messages'"
    ).fetchone()
    conn.close()
    with open(db_path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xde\xad\xbe\xef" * (page_size // 4))

    s = await SQLiteStore.open(db_path)
    try:
        with pytest.raises(StoreCorruptError) as err:
            await s.load("c1")
        text = str(err.value)
        assert str(db_path) in text and "corrupt" in text and "'c1'" in text
        # a write touching the broken page fails cleanly, nothing half-done
        with pytest.raises(StoreCorruptError):
            await commit(s, "other", "i1", 1, (b"x",), 0)
        # the store object is still alive for what does not touch the broken page
        assert [c.conversation_id for c in await s.list_conversations()] != []
        r = await commit(s, "other", "i2", 1, (), 0)
        assert r.status == "committed"
    finally:
        await s.close()
