"""Versioned migrations: applied in order at start-up, each in one transaction."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

import psycopg
import pytest

from cursor_byok.store import PostgresStore, SQLiteStore, StoreSchemaError
from cursor_byok.store.api import TurnMark
from cursor_byok.store.migrate import (
    APPLICATION_ID,
    Migration,
    latest_version,
    load_migrations,
    migrate,
    split_statements,
)
from tests.support.postgres import Cluster

from .conftest import commit, raw


def test_migrations_are_numbered_files_in_the_package() -> None:
    migs = load_migrations()
    assert migs[0].name == "0001_initial.sql"
    assert [m.version for m in migs] == list(range(1, len(migs) + 1))
    assert latest_version(migs) == len(migs)


def test_split_keeps_trigger_bodies_whole() -> None:
    sql = load_migrations()[0].sql
    statements = split_statements(sql)
    triggers = [s for s in statements if "CREATE TRIGGER" in s]
    assert len(triggers) == 3
    assert all(s.rstrip().endswith("END;") for s in triggers)
    assert sum("CREATE TABLE" in s for s in statements) == 7


async def test_fresh_database_gets_the_latest_schema(db_path: Path) -> None:
    s = await SQLiteStore.open(db_path)
    await commit(s, "c1", "i0", 0, (b"m0",))
    await s.close()
    conn = raw(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version()
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {
            "conversations",
            "messages",
            "message_rewinds",
            "input_commits",
            "llm_calls",
            "client_operations",
            "stream_diagnostics",
        } <= tables
    finally:
        conn.close()
    # reopening applies nothing and keeps the data
    async with await SQLiteStore.open(db_path) as s2:
        rec = await s2.load("c1")
        assert rec is not None and rec.messages == (b"m0",)


async def test_newer_database_is_refused_naming_both_versions(db_path: Path) -> None:
    await (await SQLiteStore.open(db_path)).close()
    conn = raw(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    latest = latest_version()
    with pytest.raises(StoreSchemaError) as err:
        await SQLiteStore.open(db_path)
    text = str(err.value)
    assert str(db_path) in text
    assert "version 99" in text and f"schema version {latest}" in text


async def test_foreign_sqlite_file_is_refused(db_path: Path) -> None:
    conn = raw(db_path)
    conn.execute("PRAGMA application_id = 7")
    conn.execute("CREATE TABLE other (x)")
    conn.close()
    with pytest.raises(StoreSchemaError, match="not a cursor-byok database"):
        await SQLiteStore.open(db_path)


def test_failed_migration_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    good = load_migrations()
    broken = Migration(
        len(good) + 1,
        f"{len(good) + 1:04d}_broken.sql",
        "CREATE TABLE extra (x INTEGER);\nCREATE TABLE conversations (y);\n",
    )
    conn = raw(path)
    try:
        assert migrate(conn, str(path), good) == len(good)
        with pytest.raises(StoreSchemaError, match=re.escape(broken.name)) as err:
            migrate(conn, str(path), (*good, broken))
        assert str(path) in str(err.value)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(good)
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name='extra'").fetchone() == (
            0,
        )
        assert not conn.in_transaction
        # a later, fixed migration applies normally
        fixed = Migration(broken.version, broken.name, "CREATE TABLE extra (x INTEGER);")
        assert migrate(conn, str(path), (*good, fixed)) == len(good) + 1
    finally:
        conn.close()


def _schema_objects(conn: sqlite3.Connection, kind: str) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))}


async def test_a_version_2_database_migrates_with_its_rows(db_path: Path) -> None:
    """A file made by the schema of version 2 (migrations 0001-0002 only, rows as that store
    wrote them, including a rewind that deleted messages) opens, keeps everything and goes on."""
    conn = raw(db_path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        assert migrate(conn, str(db_path), load_migrations()[:2]) == 2
        conn.execute("BEGIN")
        conn.execute("INSERT INTO conversations VALUES ('c1', 2, x'5332', 4, 100, 200)")
        for seq, version in enumerate((1, 1, 2, 2)):
            conn.execute(
                "INSERT INTO messages VALUES ('c1', ?, ?, ?)", (seq, version, f"m{seq}".encode())
            )
        for i in (1, 2):
            conn.execute(
                "INSERT INTO input_commits VALUES ('c1', ?, ?, ?, ?)", (f"i{i}", i, b"R", 100 * i)
            )
        # the old truncate_messages: version 3 keeps 2 messages and deletes the others
        conn.execute(
            "UPDATE conversations SET version = 3, message_count = 2, state = x'5333', "
            "updated_at_ms = 300 WHERE conversation_id = 'c1'"
        )
        conn.execute("INSERT INTO message_rewinds VALUES ('c1', 3, 2, 4, 300)")
        conn.execute("DELETE FROM messages WHERE conversation_id = 'c1' AND seq >= 2")
        conn.execute("INSERT INTO turn_marks VALUES ('c1', 1, ?, 2, 150)", (b"t" * 32,))
        conn.execute("INSERT INTO runs VALUES ('r1', 'c1', x'0a01', 90)")
        conn.execute(
            "INSERT INTO llm_calls (call_id, conversation_id, turn_id, request, request_hash, "
            "messages_hash, status, created_at_ms) "
            "VALUES ('call-1', 'c1', 't1', x'7b7d', 'h', 'm', 'committed', 120)"
        )
        conn.execute("COMMIT")
    finally:
        conn.close()

    s = await SQLiteStore.open(db_path)
    try:
        rec = await s.load("c1")
        assert rec is not None
        assert (rec.version, rec.state, rec.messages) == (3, b"S3", (b"m0", b"m1"))
        assert (rec.created_at_ms, rec.updated_at_ms) == (100, 300)
        old_mark = TurnMark(conversation_id="c1", turn=1, blob_id=b"t" * 32, message_count=2)
        assert await s.list_turn_marks("c1") == (old_mark,)  # no view: b""
        run = await s.find_run("r1")
        assert run is not None and run.request == b"\x0a\x01"
        found = await s.find_input_commit("c1", "i2")
        assert found is not None and found.committed_version == 2
        call = await s.get_llm_call("call-1")
        assert call is not None and call.status == "committed"
        # appending goes on after the history the old rewind kept; marks now carry views
        r = await commit(s, "c1", "i3", 3, (b"n2",), 2)
        assert (r.status, r.version) == ("committed", 4)
        new_mark = TurnMark(
            conversation_id="c1", turn=2, blob_id=b"u" * 32, message_count=3, view=b"V"
        )
        await s.save_turn_marks("c1", [old_mark, new_mark], unchanged=1)
        assert await s.list_turn_marks("c1") == (old_mark, new_mark)
        rec = await s.load("c1")
        assert rec is not None and rec.messages == (b"m0", b"m1", b"n2")
    finally:
        await s.close()

    conn = raw(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version() >= 3
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        triggers = _schema_objects(conn, "trigger")
        assert "messages_delete_only_by_rewind" not in triggers
        assert {"messages_no_update", "messages_no_gap", "messages_never_deleted"} <= triggers
        # the record of the old rewind is kept
        assert conn.execute("SELECT * FROM message_rewinds").fetchall() == [("c1", 3, 2, 4, 300)]
        columns = {r[1]: r[2] for r in conn.execute("PRAGMA table_info(turn_marks)")}
        assert columns["view"] == "BLOB"
        # a rewind row of the current version no longer lets a DELETE through
        conn.execute("INSERT INTO message_rewinds VALUES ('c1', 4, 0, 3, 400)")
        with pytest.raises(sqlite3.IntegrityError, match="never deleted"):
            conn.execute("DELETE FROM messages WHERE conversation_id = 'c1'")
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (3,)
    finally:
        conn.close()


def test_migration_3_splits_into_its_statements() -> None:
    (mig,) = [m for m in load_migrations() if m.version == 3]
    statements = split_statements(mig.sql)
    kinds = [" ".join(_strip_sql_comments(s).split()[:2]) for s in statements]
    assert kinds == ["DROP TRIGGER", "CREATE TRIGGER", "CREATE TRIGGER", "ALTER TABLE"]
    assert all(s.rstrip().endswith("END;") for s in statements if "CREATE TRIGGER" in s)


def _strip_sql_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


async def test_postgresql_migrates_once_refuses_newer_and_foreign_databases(
    pg_cluster: Cluster,
) -> None:
    """PostgreSQL (store/postgres/schema.py): replicas starting together migrate once (the
    advisory lock), the version is the latest of the one numbered list, a newer version and a
    database that is not cursor-byok's are refused naming why."""
    url = pg_cluster.create_database("migrate_pg")
    stores = await asyncio.gather(*(PostgresStore.open(url) for _ in range(4)))
    latest = latest_version(load_migrations("postgresql"))
    assert latest == latest_version(load_migrations("sqlite"))  # one list, both dialects
    assert {s.schema_version for s in stores} == {latest}
    for s in stores:
        await s.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE cursor_byok_schema SET version = 99")
    with pytest.raises(StoreSchemaError, match=f"version 99 is newer.*schema version {latest}"):
        await PostgresStore.open(url)

    foreign = pg_cluster.create_database("foreign_pg")
    with psycopg.connect(foreign, autocommit=True) as conn:
        conn.execute("CREATE TABLE conversations (id TEXT)")
    with pytest.raises(StoreSchemaError, match="not a cursor-byok database"):
        await PostgresStore.open(foreign)
