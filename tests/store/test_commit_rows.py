"""Rows that ride along with a commit (turn marks, a run's outcome): written in its
transaction when it commits, never when it does not."""

from __future__ import annotations

import pytest

from cursor_byok.store import AnyStore
from cursor_byok.store.api import RunOutcomeRecord, TurnMark
from cursor_byok.store.sql import activity, jobs


def mark(turn: int, blob: bytes | None = None) -> TurnMark:
    return TurnMark(
        conversation_id="c1",
        turn=turn,
        blob_id=blob or bytes([turn]) * 32,
        message_count=2 * turn,
        view=b"v%d" % turn,
    )


def outcome(request_id: str, result: str = "ok", title: str = "") -> RunOutcomeRecord:
    return RunOutcomeRecord(
        request_id=request_id,
        conversation_id="c1",
        outcome=result,
        finished_at_ms=1_780_000_000_000,
        title=title,
        llm_calls=1,
    )


async def commit(store: AnyStore, input_id: str, version: int, **rows: object) -> tuple[str, int]:
    result = await store.commit_input(
        "c1",
        input_id=input_id,
        expected_version=version,
        state=b"state",
        append_messages=(b"m",),
        expected_message_count=version,
        result=b"r",
        **rows,  # type: ignore[arg-type]
    )
    return result.status, result.version


async def test_a_commit_writes_its_marks_and_outcome(store: AnyStore) -> None:
    marks = [mark(1)]
    assert await commit(store, "i1", 0, turn_marks=marks, run_outcome=outcome("r1")) == (
        "committed",
        1,
    )
    assert await store.list_turn_marks("c1") == tuple(marks)
    assert await store.list_recent_run_outcomes() == (outcome("r1"),)
    # A later commit without them leaves them as they are.
    assert await commit(store, "i2", 1) == ("committed", 2)
    assert await store.list_turn_marks("c1") == tuple(marks)
    assert await store.list_recent_run_outcomes() == (outcome("r1"),)


async def test_marks_ride_as_save_turn_marks_writes_them(store: AnyStore) -> None:
    """`unchanged_marks` means what `unchanged` means to save_turn_marks: the first ones are
    not written again while the store holds exactly that many; a rewind drops later ones."""
    await store.save_turn_marks("c1", [mark(1), mark(2)])
    lied = [mark(1), mark(2, b"x" * 32), mark(3)]
    assert (await commit(store, "i1", 0, turn_marks=lied, unchanged_marks=2))[0] == "committed"
    assert await store.list_turn_marks("c1") == (mark(1), mark(2), mark(3))
    # the store holding fewer than `unchanged_marks`: every mark is written
    await store.save_turn_marks("c1", [mark(1)])
    assert (await commit(store, "i2", 1, turn_marks=lied, unchanged_marks=2))[0] == "committed"
    assert await store.list_turn_marks("c1") == tuple(lied)
    # a rewind to turn 1
    assert (await commit(store, "i3", 2, turn_marks=lied[:1], unchanged_marks=1))[0] == (
        "committed"
    )
    assert await store.list_turn_marks("c1") == (mark(1),)


async def test_an_outcome_replaces_the_runs_row_keeping_its_title(store: AnyStore) -> None:
    await store.save_run_outcome(outcome("r1", "canceled", title="the title"))
    assert (await commit(store, "i1", 0, run_outcome=outcome("r1")))[0] == "committed"
    assert await store.list_recent_run_outcomes() == (outcome("r1", title="the title"),)


async def test_a_commit_that_does_not_happen_writes_neither(store: AnyStore) -> None:
    assert (await commit(store, "i1", 0))[0] == "committed"
    rows: dict[str, object] = {"turn_marks": [mark(1)], "run_outcome": outcome("r1")}
    assert (await commit(store, "i2", 0, **rows))[0] == "conflict"
    assert (await commit(store, "i1", 1, **rows))[0] == "duplicate"
    assert await store.list_turn_marks("c1") == ()
    assert await store.list_recent_run_outcomes() == ()


async def test_a_commits_outcome_is_written_without_a_look_first(
    store: AnyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """save_outcome looks the row up to answer inserted or updated; a commit asks neither."""

    def refuse(conn: object, record: RunOutcomeRecord) -> None:
        raise AssertionError("the commit's outcome was looked up")

    monkeypatch.setattr(activity, "save_outcome", refuse)
    monkeypatch.setattr(jobs, "save_outcome", refuse, raising=False)  # were it imported there
    assert (await commit(store, "i1", 0, run_outcome=outcome("r1")))[0] == "committed"
    assert (await commit(store, "i2", 1, run_outcome=outcome("r1", "failed")))[0] == "committed"
    assert await store.list_recent_run_outcomes() == (outcome("r1", "failed"),)
