"""Run requests and turn marks (with their opaque `view`)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from cursor_byok.store import AnyStore
from cursor_byok.store.api import RunRecord, TurnMark
from cursor_byok.store.sqlite import SQLiteStore

from .conftest import raw


async def test_run_requests_survive_a_reopen(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path)
    run = RunRecord(request_id="r1", conversation_id="c1", request=b"\x0a\x01x", created_at_ms=1)
    assert (await store.save_run(run)).outcome == "inserted"
    assert (await store.save_run(run)).outcome == "unchanged"
    other = RunRecord(request_id="r1", conversation_id="c1", request=b"other", created_at_ms=2)
    assert (await store.save_run(other)).outcome == "ignored"
    await store.close()
    store = await SQLiteStore.open(db_path)
    assert await store.find_run("r1") == run
    assert await store.find_run("nope") is None
    await store.close()


async def test_turn_marks_are_replaced_whole(store: AnyStore) -> None:
    marks = [
        TurnMark(conversation_id="c1", turn=i, blob_id=bytes([i]) * 32, message_count=2 * i)
        for i in (1, 2, 3)
    ]
    await store.save_turn_marks("c1", marks)
    assert await store.list_turn_marks("c1") == tuple(marks)
    await store.save_turn_marks("c1", marks[:1])  # a rewind to turn 1
    assert await store.list_turn_marks("c1") == (marks[0],)
    assert await store.list_turn_marks("c2") == ()


async def test_unchanged_turn_marks_are_not_written_again(store: AnyStore) -> None:
    """A new turn writes its own mark only; if an earlier write was lost, all are written."""
    marks = [
        TurnMark(conversation_id="c1", turn=i, blob_id=bytes([i]) * 32, message_count=2 * i)
        for i in range(1, 6)
    ]
    await store.save_turn_marks("c1", marks[:3])
    await store.save_turn_marks("c1", marks[:4], unchanged=3)
    assert await store.list_turn_marks("c1") == tuple(marks[:4])
    # what `unchanged` covers is not written again (a caller that lied is believed) ...
    changed = [
        *marks[:2],
        TurnMark(conversation_id="c1", turn=3, blob_id=b"x" * 32, message_count=6),
        marks[3],
        marks[4],
    ]
    await store.save_turn_marks("c1", changed, unchanged=4)
    assert await store.list_turn_marks("c1") == (*marks[:4], marks[4])
    # ... unless the store does not hold that many: then every mark is written
    await store.save_turn_marks("c1", marks[:2])  # the store now holds 2
    await store.save_turn_marks("c1", changed, unchanged=4)
    assert await store.list_turn_marks("c1") == tuple(changed)
    # a rewind keeps a prefix and drops the rest
    await store.save_turn_marks("c1", changed[:2], unchanged=2)
    assert await store.list_turn_marks("c1") == tuple(changed[:2])
    await store.save_turn_marks("c1", [], unchanged=3)
    assert await store.list_turn_marks("c1") == ()


async def test_turn_mark_views_are_kept_as_given(store: AnyStore, db_path: Path) -> None:
    """`view` is opaque bytes: any bytes come back unchanged, no view comes back as b"" (stored
    as NULL), through a whole write and through `unchanged=n`."""
    views = [b"\x00view-1\xff", b"", b"v3" * 50_000, b"\x00"]
    marks = [
        TurnMark(conversation_id="c1", turn=i, blob_id=bytes([i]) * 32, message_count=2 * i, view=v)
        for i, v in enumerate(views, start=1)
    ]
    assert TurnMark(conversation_id="c1", turn=1, blob_id=b"b", message_count=0).view == b""
    await store.save_turn_marks("c1", marks[:2])
    assert await store.list_turn_marks("c1") == tuple(marks[:2])
    # only the new marks are written; the kept ones keep their views
    await store.save_turn_marks("c1", marks, unchanged=2)
    assert await store.list_turn_marks("c1") == tuple(marks)
    conn = raw(db_path)
    try:
        stored = conn.execute(
            "SELECT turn, view FROM turn_marks WHERE conversation_id = 'c1' ORDER BY turn"
        ).fetchall()
    finally:
        conn.close()
    assert stored == [(1, views[0]), (2, None), (3, views[2]), (4, views[3])]
    # a lost write (the store holds fewer than `unchanged`): every mark is written, views too
    await store.save_turn_marks("c1", marks[:1])
    await store.save_turn_marks("c1", marks, unchanged=3)
    assert await store.list_turn_marks("c1") == tuple(marks)
    # a rewind keeps a prefix with its views; a mark may be written again with another view
    await store.save_turn_marks("c1", marks[:2], unchanged=2)
    assert await store.list_turn_marks("c1") == tuple(marks[:2])
    redone = msgspec.structs.replace(marks[1], view=b"after the rewind")
    await store.save_turn_marks("c1", [marks[0], redone], unchanged=1)
    assert await store.list_turn_marks("c1") == (marks[0], redone)
