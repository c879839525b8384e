"""An LLM call record saved in one statement: the row is read only when nothing was written.

The rules are test_records.py's; these tests pin the fast path: a record that is new, or that
changes a call still open, never reads its row (reading it raises here), a field going to or
from NULL counts as a change, and a commit's records follow the same rules.
"""

from __future__ import annotations

import pytest

from cursor_byok.store import AnyStore, LLMCallRecord, RecordMismatchError
from cursor_byok.store.sql import jobs

from .conftest import call_record, commit


@pytest.fixture
async def conv(store: AnyStore) -> AnyStore:
    await commit(store, "c1", "i0", 0, (b"m0",))
    return store


@pytest.fixture
def no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a call's row inside a write fails: only the fast path may run."""

    def refuse(conn: object, call_id: str) -> LLMCallRecord | None:
        raise AssertionError(f"the save of {call_id!r} read its row")

    monkeypatch.setattr(jobs, "get_call", refuse)


async def test_a_new_or_changed_open_call_is_saved_without_reading_it(
    conv: AnyStore, no_reads: None
) -> None:
    assert (await conv.save_llm_call(call_record("call-1"))).outcome == "inserted"
    # to and from NULL, and between values: each a change
    failed = call_record("call-1", status="failed", error="502", created_at_ms=7)
    assert (await conv.save_llm_call(failed)).outcome == "updated"
    retried = call_record("call-1", status="streaming", provider="p", created_at_ms=8)
    assert (await conv.save_llm_call(retried)).outcome == "updated"
    # a field alone, to and from NULL
    with_model = call_record("call-1", status="streaming", provider="p", model="m")
    assert (await conv.save_llm_call(with_model)).outcome == "updated"
    assert (await conv.save_llm_call(retried)).outcome == "updated"
    done = call_record("call-1", status="committed", provider="p", cost_usd=0.25, ttft_ms=3)
    assert (await conv.save_llm_call(done)).outcome == "updated"


async def test_saved_fields_and_the_first_created_at(conv: AnyStore) -> None:
    await conv.save_llm_call(call_record("call-1", error="x", ttft_ms=4))
    again = call_record("call-1", status="streaming", created_at_ms=99, cost_usd=0.5)
    assert (await conv.save_llm_call(again)).outcome == "updated"
    assert await conv.get_llm_call("call-1") == call_record(
        "call-1", status="streaming", cost_usd=0.5
    )
    # only created_at_ms differs: nothing to write
    same = call_record("call-1", status="streaming", created_at_ms=5, cost_usd=0.5)
    assert (await conv.save_llm_call(same)).outcome == "unchanged"


async def test_a_commits_records_are_saved_without_reading_them(
    conv: AnyStore, no_reads: None
) -> None:
    planned = call_record("call-1", turn_id="t1")
    r = await commit(conv, "c1", "i1", 1, (b"m1",), llm_calls=(planned,))
    assert r.status == "committed" and r.ignored == ()
    done = call_record("call-1", status="committed", assistant_hash="h", error=None)
    r = await commit(conv, "c1", "i2", 2, (b"m2",), llm_calls=(done, call_record("call-2")))
    assert r.status == "committed" and r.ignored == ()
    assert await conv.get_llm_call("call-1") == done
    assert await conv.get_llm_call("call-2") == call_record("call-2")


async def test_a_commits_record_of_a_committed_call_is_ignored(conv: AnyStore) -> None:
    done = call_record("call-1", status="committed", assistant_hash="h")
    await conv.save_llm_call(done)
    late = call_record("call-1", status="failed", error="late")
    r = await commit(conv, "c1", "i1", 1, (b"m1",), llm_calls=(late, done))
    assert r.status == "committed" and r.ignored == ("call-1",)
    assert await conv.get_llm_call("call-1") == done


async def test_a_commits_record_that_changes_a_fixed_field_undoes_the_commit(
    conv: AnyStore,
) -> None:
    await conv.save_llm_call(call_record("call-1"))
    other = call_record("call-1", status="streaming", turn_id="t2")
    with pytest.raises(RecordMismatchError, match="turn_id"):
        await commit(conv, "c1", "i1", 1, (b"m1",), llm_calls=(other,))
    head = await conv.head("c1")
    assert head is not None and head.version == 1
    assert await conv.get_llm_call("call-1") == call_record("call-1")
