"""Real database files for the storage tests: written through SQLiteStore, then damaged the way
a bad disk or a stray write would damage them."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

from cursor_byok.store.sqlite import SQLiteStore


def build_database(path: Path, *, conversations: int = 1, messages: int = 8) -> int:
    """A database of `conversations` conversations of `messages` messages of 1.2 KB each,
    written by the store; returns its size in bytes (the WAL checkpointed into the file)."""

    async def build() -> None:
        store = await SQLiteStore.open(path, synchronous="NORMAL")
        try:
            body = os.urandom(1200)
            for c in range(conversations):
                done = 0
                while done < messages:
                    batch = min(5000, messages - done)
                    await store.commit_input(
                        f"conv-{c}",
                        input_id=f"input-{done}",
                        expected_version=done // 5000,
                        state=os.urandom(200),
                        append_messages=[body] * batch,
                        expected_message_count=done,
                        result=b"r",
                        durable=False,
                    )
                    done += batch
        finally:
            await store.close()

    asyncio.run(build())
    checkpoint(path)
    return path.stat().st_size


def checkpoint(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
    finally:
        conn.close()


def page_geometry(path: Path) -> tuple[int, int]:
    """(page size, page count) of a database file."""
    conn = sqlite3.connect(path)
    try:
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    finally:
        conn.close()
    return page_size, pages


def corrupt_middle_page(path: Path, fill: bytes = b"\xde\xad\xbe\xef") -> int:
    """Overwrite the page in the middle of the file (the bytes at page_size * k) with `fill`;
    returns its page number as SQLite counts them (k + 1). The file must have been checkpointed
    (no WAL), or SQLite would read the page from the WAL."""
    page_size, pages = page_geometry(path)
    assert pages >= 10, f"{path} has only {pages} pages: too small to have a middle"
    k = pages // 2
    with open(path, "r+b") as f:
        f.seek(page_size * k)
        f.write((fill * (page_size // len(fill) + 1))[:page_size])
    return k + 1
