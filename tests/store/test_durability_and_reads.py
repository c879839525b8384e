"""Which commits are fsynced, and where reads run (docs/store.md, "Durability" and "Reads")."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cursor_byok.store import AnyStore, SQLiteStore, open_store
from cursor_byok.store.api import RunRecord
from cursor_byok.store.sqlite import INLINE_MESSAGES


async def _commit(store: AnyStore, cid: str, *, durable: bool, count: int = 1) -> None:
    result = await store.commit_input(
        cid,
        input_id="i1",
        expected_version=0,
        state=b"s",
        append_messages=[f"m{i}".encode() for i in range(count)],
        expected_message_count=0,
        result=b"",
        durable=durable,
    )
    assert result.status == "committed"


@pytest.mark.sqlite_only
async def test_only_durable_commits_are_fsynced(store: AnyStore) -> None:
    before = store.stats().synced_batches
    await _commit(store, "quick", durable=False)
    await store.save_run(
        RunRecord(request_id="r", conversation_id="quick", request=b"x", created_at_ms=1)
    )
    assert store.stats().synced_batches == before
    await _commit(store, "safe", durable=True)
    assert store.stats().synced_batches == before + 1
    await _commit(store, "quick-again", durable=False)  # back to no fsync after a durable one
    assert store.stats().synced_batches == before + 1
    for cid in ("quick", "safe", "quick-again"):
        record = await store.load(cid)
        assert record is not None and record.messages == (b"m0",)


async def test_a_normal_store_never_fsyncs_a_commit(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path, synchronous="NORMAL")
    try:
        await _commit(store, "c", durable=True)
        assert store.stats().synced_batches == 0
    finally:
        await store.close()


_CHILD = """
import asyncio, sys
from cursor_byok.store import open_store
async def main():
    store = await open_store(sys.argv[1])
    await store.commit_input("c", input_id="i", expected_version=0, state=b"s",
        append_messages=[b"kept"], expected_message_count=0, result=b"", durable=False)
    print("committed", flush=True)
    await asyncio.sleep(60)
asyncio.run(main())
"""


async def test_a_non_durable_commit_survives_kill_9(database: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, database],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
    )
    try:
        assert child.stdout is not None
        assert (await asyncio.to_thread(child.stdout.readline)).strip() == "committed"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    store = await open_store(database)
    try:
        record = await store.load("c")
        assert record is not None and record.messages == (b"kept",) and record.version == 1
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_point_reads_run_on_the_callers_thread(store: AnyStore) -> None:
    await _commit(store, "small", durable=True, count=3)
    await store.save_run(
        RunRecord(request_id="r1", conversation_id="small", request=b"x", created_at_ms=1)
    )
    record = await store.load("small")
    assert record is not None and len(record.messages) == 3
    assert await store.load("missing") is None
    assert await store.find_input_commit("small", "i1") is not None
    assert (await store.find_run("r1")) is not None
    assert await store.list_turn_marks("small") == ()
    assert store._reads.pool_connections == 0  # no reader thread was needed


@pytest.mark.sqlite_only
async def test_a_large_conversation_loads_on_a_reader_thread(store: AnyStore) -> None:
    await _commit(store, "large", durable=True, count=INLINE_MESSAGES + 1)
    record = await store.load("large")
    assert record is not None and len(record.messages) == INLINE_MESSAGES + 1
    assert record.messages[-1] == f"m{INLINE_MESSAGES}".encode()
    assert store._reads.pool_connections == 1


async def test_reads_from_another_thread_use_the_reader_pool(db_path: Path) -> None:
    # One reader thread: with more, the pool may start a second thread for the second read
    # (ThreadPoolExecutor counts a worker idle only after it handed its result over), which
    # made this test fail about once in 300 runs.
    store = await SQLiteStore.open(db_path, readers=1)
    try:
        await _commit(store, "c", durable=True)
        assert (await store.load("c")) is not None  # the inline connection now belongs here
        found: list[object] = []

        async def elsewhere() -> None:
            found.append(await store.load("c"))
            found.append(await store.find_input_commit("c", "i1"))

        thread = threading.Thread(target=lambda: asyncio.run(elsewhere()))
        thread.start()
        await asyncio.to_thread(thread.join, 10)
        assert len(found) == 2 and all(item is not None for item in found)
        assert store._reads.pool_connections == 1
    finally:
        await store.close()
