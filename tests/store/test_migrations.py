"""Versioned migrations: applied in order at start-up, each in one transaction."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cursor_byok.store import SQLiteStore, StoreSchemaError
from cursor_byok.store.migrate import (
    APPLICATION_ID,
    Migration,
    latest_version,
    load_migrations,
    migrate,
    split_statements,
)

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
