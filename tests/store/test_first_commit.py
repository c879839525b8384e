"""The first commit of a conversation inserts it without looking its input up first.

An input already committed names a conversation that exists, so the insert meets that row
and the look-up after it tells a duplicate from a conflict; these tests pin both sides.
"""

from __future__ import annotations

import asyncio

import pytest

from cursor_byok.store import AnyStore, InputCommit
from cursor_byok.store.sql import jobs

from .conftest import commit


async def test_a_new_conversation_is_committed_without_a_look_up(
    store: AnyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(conn: object, conversation_id: str, input_id: str) -> InputCommit | None:
        raise AssertionError(f"the commit of {input_id!r} looked its input up")

    monkeypatch.setattr(jobs, "find_input", refuse)
    r = await commit(store, "c1", "i0", 0, (b"m0",))
    assert (r.status, r.version) == ("committed", 1)


async def test_the_first_input_again_is_a_duplicate(store: AnyStore) -> None:
    await commit(store, "c1", "i0", 0, (b"m0",), result=b"R0")
    await commit(store, "c1", "i1", 1, (b"m1",))
    before = await store.load("c1")
    r = await commit(store, "c1", "i0", 0, (b"m0",), result=b"other")
    assert (r.status, r.version) == ("duplicate", 2)
    assert r.previous is not None
    assert (r.previous.committed_version, r.previous.result) == (1, b"R0")
    other = await commit(store, "c1", "i9", 0, (b"m0",))
    assert (other.status, other.version) == ("conflict", 2)
    assert await store.load("c1") == before


async def test_the_first_input_sent_twice_at_once_commits_once(store: AnyStore) -> None:
    for i in range(20):
        cid = f"new-{i}"
        a, b = await asyncio.gather(
            commit(store, cid, "first", 0, (b"m0",), result=b"R"),
            commit(store, cid, "first", 0, (b"m0",), result=b"R"),
        )
        assert sorted((a.status, b.status)) == ["committed", "duplicate"], (i, a, b)
        dup = a if a.status == "duplicate" else b
        assert dup.previous is not None and dup.previous.result == b"R"
        rec = await store.load(cid)
        assert rec is not None and rec.messages == (b"m0",) and rec.version == 1
