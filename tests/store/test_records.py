"""LLM call and client operation records: upsert rules, immutability, listings."""

from __future__ import annotations

import pytest

from cursor_byok.store import AnyStore, RecordMismatchError, StoreIntegrityError

from .conftest import call_record, commit, open_with_clock, operation_record


@pytest.fixture
async def conv(store: AnyStore) -> AnyStore:
    await commit(store, "c1", "i0", 0, (b"m0",))
    return store


async def test_llm_call_upsert_keeps_request_bytes_immutable(conv: AnyStore) -> None:
    request = b'{"model":"m","messages":[' + b"x" * 20_000 + b"]}"
    planned = call_record("call-1", request=request)
    assert (await conv.save_llm_call(planned)).outcome == "inserted"
    assert (await conv.save_llm_call(planned)).outcome == "unchanged"
    streaming = call_record("call-1", request=request, status="streaming", created_at_ms=5)
    assert (await conv.save_llm_call(streaming)).outcome == "updated"
    stored = await conv.get_llm_call("call-1")
    assert stored is not None
    assert stored.status == "streaming"
    assert stored.created_at_ms == 1000  # the first value is kept
    assert stored.request == request
    with pytest.raises(RecordMismatchError, match="request") as err:
        await conv.save_llm_call(call_record("call-1", request=request + b" "))
    assert conv.path in str(err.value)
    with pytest.raises(RecordMismatchError, match="messages_hash"):
        await conv.save_llm_call(call_record("call-1", request=request, messages_hash="x"))
    assert await conv.get_llm_call("call-1") == stored


async def test_llm_call_observability_fields_round_trip(conv: AnyStore) -> None:
    done = call_record(
        "call-1",
        status="committed",
        assistant_hash="a" * 64,
        provider="openai",
        model="gpt-x",
        api="openai-responses",
        input_tokens=1200,
        output_tokens=80,
        cache_read_tokens=1000,
        cache_write_tokens=0,
        reasoning_tokens=12,
        ttft_ms=340,
        duration_ms=2100,
        cost_usd=0.00123,
        error=None,
        finished_at_ms=3100,
    )
    await conv.save_llm_call(done)
    assert await conv.get_llm_call("call-1") == done
    assert await conv.get_llm_call("missing") is None


async def test_committed_llm_call_is_final(conv: AnyStore) -> None:
    await conv.save_llm_call(call_record("call-1", status="committed", assistant_hash="h1"))
    late = await conv.save_llm_call(call_record("call-1", status="failed", error="dup stream"))
    assert late.outcome == "ignored" and "committed" in late.reason
    stored = await conv.get_llm_call("call-1")
    assert stored is not None and (stored.status, stored.assistant_hash) == ("committed", "h1")


async def test_failed_llm_call_can_be_retried_with_the_same_id(conv: AnyStore) -> None:
    await conv.save_llm_call(call_record("call-1", status="failed", error="502"))
    r = await conv.save_llm_call(call_record("call-1", status="streaming"))
    assert r.outcome == "updated"
    stored = await conv.get_llm_call("call-1")
    assert stored is not None and stored.status == "streaming" and stored.error is None


async def test_llm_call_needs_a_known_conversation_and_a_valid_status(
    conv: AnyStore,
) -> None:
    with pytest.raises(StoreIntegrityError, match="FOREIGN KEY"):
        await conv.save_llm_call(call_record("call-x", conversation_id="unknown"))
    with pytest.raises(StoreIntegrityError, match="CHECK"):
        await conv.save_llm_call(call_record("call-y", status="done"))


async def test_client_operation_lifecycle_and_completed_result_kept(conv: AnyStore) -> None:
    op = operation_record("op-1")
    assert (await conv.save_client_operation(op)).outcome == "inserted"
    sent = operation_record("op-1", status="sent", updated_at_ms=1500)
    assert (await conv.save_client_operation(sent)).outcome == "updated"
    assert (await conv.save_client_operation(sent)).outcome == "unchanged"
    done = operation_record("op-1", status="completed", result=b"wrote 3 bytes", updated_at_ms=2000)
    assert (await conv.save_client_operation(done)).outcome == "updated"
    # replayed identical completion
    same = operation_record("op-1", status="completed", result=b"wrote 3 bytes", updated_at_ms=9)
    assert (await conv.save_client_operation(same)).outcome == "unchanged"
    # a second completion with a different result, or a later status, is ignored and reported
    other = operation_record("op-1", status="completed", result=b"other", updated_at_ms=3000)
    r = await conv.save_client_operation(other)
    assert r.outcome == "ignored" and "kept forever" in r.reason
    unknown = operation_record("op-1", status="unknown", updated_at_ms=4000)
    assert (await conv.save_client_operation(unknown)).outcome == "ignored"
    assert await conv.get_client_operation("op-1") == done
    with pytest.raises(RecordMismatchError, match="request"):
        await conv.save_client_operation(operation_record("op-1", request=b"{}"))
    with pytest.raises(StoreIntegrityError, match="CHECK"):
        await conv.save_client_operation(operation_record("op-2", status="completed"))
    assert await conv.get_client_operation("op-2") is None


async def test_listings_for_the_dashboard(database: str) -> None:
    times = iter(range(10_000, 20_000, 10))
    s = await open_with_clock(database, lambda: next(times))
    try:
        for c in ("a", "b", "c"):
            await commit(s, c, "i0", 0, (b"m",))
        await commit(s, "a", "i1", 1, (b"m",))
        summaries = await s.list_conversations(limit=2)
        assert [x.conversation_id for x in summaries] == ["a", "c"]
        assert (summaries[0].version, summaries[0].message_count) == (2, 2)
        for i in range(5):
            await s.save_llm_call(call_record(f"call-{i}", "a", created_at_ms=100 + i))
        recent = await s.list_recent_llm_calls(limit=3)
        assert [x.call_id for x in recent] == ["call-4", "call-3", "call-2"]
    finally:
        await s.close()


async def test_stream_diagnostics_are_kept_apart(conv: AnyStore) -> None:
    await conv.save_llm_call(call_record("call-1"))
    await conv.append_stream_diagnostics("call-1", [(0, b"start"), (1, b"delta")])
    await conv.append_stream_diagnostics("call-1", [(1, b"again"), (2, b"done")])
    assert await conv.list_stream_diagnostics("call-1") == (
        (0, b"start"),
        (1, b"delta"),
        (2, b"done"),
    )
    rec = await conv.load("c1")
    assert rec is not None and rec.messages == (b"m0",)
