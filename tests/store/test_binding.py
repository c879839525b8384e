"""The identity adapters of store/sqlite/binding.py: values bind as given, another's kept."""

from __future__ import annotations

import sqlite3

import pytest

from cursor_byok.store import SQLiteStore
from cursor_byok.store.sqlite import binding

from .conftest import call_record, commit

NONE = (type(None), sqlite3.PrepareProtocol)
BYTES = (bytes, sqlite3.PrepareProtocol)


async def test_an_open_store_binds_none_and_bytes_as_given(tmp_path: object) -> None:
    async with await SQLiteStore.open(f"{tmp_path}/store.db") as store:
        assert sqlite3.adapters[NONE] is binding._same
        assert sqlite3.adapters[BYTES] is binding._same
        blob = bytes(range(256)) * 4
        await commit(store, "c1", "i0", 0, (blob, b""), 0, state=b"\x00state")
        planned = call_record("call-1", request=blob, error=None, prompt_breakdown=b"")
        await store.save_llm_call(planned)
        loaded = await store.load("c1")
        assert loaded is not None and loaded.messages == (blob, b"")
        assert loaded.state == b"\x00state"
        assert await store.get_llm_call("call-1") == planned
    conn = sqlite3.connect(f"{tmp_path}/store.db")
    try:
        kinds = conn.execute(
            "SELECT typeof(request), typeof(error), typeof(prompt_breakdown) FROM llm_calls"
        ).fetchone()
    finally:
        conn.close()
    assert kinds == ("blob", "null", "blob")


def test_an_adapter_registered_before_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    def theirs(value: bytes) -> str:
        return value.hex()

    monkeypatch.setitem(sqlite3.adapters, BYTES, theirs)
    monkeypatch.delitem(sqlite3.adapters, NONE, raising=False)
    binding.install()
    binding.install()
    assert sqlite3.adapters[BYTES] is theirs
    assert sqlite3.adapters[NONE] is binding._same
