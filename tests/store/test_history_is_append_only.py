"""Messages are never deleted: the database refuses it, and nothing in the store asks for it.

A rewind is a view the runtime keeps in its state bytes (and with each turn mark); the store
only appends (docs/store.md, "Rewind").
"""

from __future__ import annotations

import re
import sqlite3
from importlib import resources
from pathlib import Path

import psycopg
import pytest

from cursor_byok.store import AnyStore, PostgresStore, SQLiteStore, Store
from tests.support.postgres import Cluster

from .conftest import commit, raw


async def test_messages_table_refuses_updates_gaps_and_every_delete(
    store: AnyStore, db_path: Path
) -> None:
    for v in range(3):
        await commit(store, "c1", f"i{v}", v, (f"m{v}".encode(),))
    conn = raw(db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE messages SET body = x'00' WHERE seq = 0")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM messages WHERE seq = 2")
        with pytest.raises(sqlite3.IntegrityError, match="gap"):
            conn.execute("INSERT INTO messages VALUES ('c1', 7, 3, x'00')")
    finally:
        conn.close()
    rec = await store.load("c1")
    assert rec is not None and rec.messages == (b"m0", b"m1", b"m2")
    # the API has no other way to change or remove a message
    public = {n for n in dir(store) if not n.startswith("_")}
    assert not {n for n in public if "delete" in n or "update" in n}
    assert not {n for n in public if "truncate" in n or "rewind" in n or "remove" in n}


async def test_postgresql_messages_refuse_updates_gaps_deletes_replacements_and_truncate(
    pg_cluster: Cluster,
) -> None:
    """The same rules as SQLite's triggers, in PL/pgSQL (0001, 0003 for PostgreSQL), by direct
    SQL on the database; TRUNCATE, which skips row triggers, is refused too."""
    url = pg_cluster.create_database("append_only")
    store = await PostgresStore.open(url)
    try:
        for v in range(3):
            await commit(store, "c1", f"i{v}", v, (f"m{v}".encode(),))
        statements = {
            "UPDATE messages SET body = '\\x00' WHERE seq = 0": "append-only: no update",
            "DELETE FROM messages WHERE seq = 2": "never deleted",
            "INSERT INTO messages VALUES ('c1', 7, 3, '\\x00')": "gap in seq",
            "INSERT INTO messages VALUES ('c1', 1, 3, '\\x00')": "duplicate key",
            "TRUNCATE messages CASCADE": "never deleted",
        }
        with psycopg.connect(url, autocommit=True) as conn:
            for sql, why in statements.items():
                with pytest.raises(psycopg.Error, match=why):
                    conn.execute(sql)
        rec = await store.load("c1")
        assert rec is not None and rec.messages == (b"m0", b"m1", b"m2")
    finally:
        await store.close()


async def test_a_delete_is_refused_even_where_a_rewind_once_allowed_it(
    store: AnyStore, db_path: Path
) -> None:
    """Before migration 0003 a `message_rewinds` row of the conversation's current version let
    a DELETE of the rows past `keep` through; now nothing does."""
    for v in range(4):
        await commit(store, "c1", f"i{v}", v, (f"m{v}".encode(),))
    conn = raw(db_path)
    try:
        conn.execute("INSERT INTO message_rewinds VALUES ('c1', 4, 1, 4, 0)")
        for sql in (
            "DELETE FROM messages WHERE conversation_id = 'c1' AND seq >= 1",
            "DELETE FROM messages WHERE conversation_id = 'c1' AND seq = 3",
            "DELETE FROM messages",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="never deleted"):
                conn.execute(sql)
        # REPLACE deletes the row it replaces without firing delete triggers: refused too
        with pytest.raises(sqlite3.IntegrityError, match="never replaced"):
            conn.execute("INSERT OR REPLACE INTO messages VALUES ('c1', 0, 1, x'00')")
        with pytest.raises(sqlite3.IntegrityError, match="never replaced"):
            conn.execute("REPLACE INTO messages VALUES ('c1', 3, 4, x'00')")
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (4,)
    finally:
        conn.close()
    rec = await store.load("c1")
    assert rec is not None and rec.messages == (b"m0", b"m1", b"m2", b"m3")


# SQL that would remove message rows (or the trigger that refuses it), in any module.
_REMOVES_MESSAGES = re.compile(
    r"DELETE\s+FROM\s+[\"'`\[]?messages\b"
    r"|DROP\s+TABLE\s+(IF\s+EXISTS\s+)?[\"'`\[]?messages\b"
    r"|DROP\s+TRIGGER\s+(IF\s+EXISTS\s+)?[\"'`\[]?messages_never_deleted\b"
    r"|REPLACE\s+INTO\s+[\"'`\[]?messages\b",
    re.IGNORECASE,
)


def test_nothing_in_the_store_deletes_message_rows() -> None:
    root = resources.files("cursor_byok.store")
    sources: dict[str, str] = {}

    def walk(folder: resources.abc.Traversable, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith((".py", ".sql")):
                sources[prefix + entry.name] = entry.read_text(encoding="utf-8")

    walk(root, "")
    # the scan sees the code that writes (so an empty scan cannot pass)
    assert {"api.py", "sql/jobs.py", "sqlite/store.py", "sqlite/writer.py"} <= set(sources)
    assert any(name.startswith("migrations/0003_") for name in sources)
    found = {
        name: m.group(0) for name, text in sources.items() if (m := _REMOVES_MESSAGES.search(text))
    }
    assert found == {}
    assert not hasattr(Store, "truncate_messages")
    assert not hasattr(SQLiteStore, "truncate_messages")
