"""A model call's record keeps its context meter (records.py `CallMeter`, migration 0006)."""

from __future__ import annotations

from cursor_byok.llm.types import Usage
from cursor_byok.loop import CallEnd, CallOutcome
from cursor_byok.loop.meter import PromptChars, measure
from cursor_byok.store.api import LLMCallRecord
from cursor_byok.transport.runtime import records

CHARS = PromptChars(system_prompt=4000, tools=8000, conversation=1000, images=1)


def planned() -> LLMCallRecord:
    return LLMCallRecord(
        call_id="c1",
        conversation_id="conv",
        turn_id="t1",
        request=b"{}",
        request_hash="h",
        messages_hash="m",
        status="planned",
        created_at_ms=1,
        prompt_breakdown=records.encode_call_meter(CHARS, measure(CHARS, used=0, window=64_000)),
    )


def finish(usage: Usage) -> records.CallMeter:
    end = CallEnd("c1", CallOutcome.COMMITTED)
    done = records.finished_call(
        planned(),
        end,
        usage=usage,
        answer_bytes=None,
        ttft_ms=None,
        duration_ms=None,
        now_ms=2,
    )
    assert done.prompt_breakdown is not None
    return records.decode_call_meter(done.prompt_breakdown)


def test_a_finished_call_is_scaled_to_the_providers_usage() -> None:
    kept = finish(Usage(input=1_000, cache_read=3_000, cache_write=500, output=80))
    assert kept.chars == CHARS  # images included: a later rescale needs them
    assert kept.meter.measured and kept.meter.used_tokens == 4_500
    assert kept.meter.max_tokens == 64_000
    assert sum(c.tokens for c in kept.meter.categories) == 4_500


def test_a_call_without_usage_keeps_its_estimate() -> None:
    kept = finish(Usage())
    assert not kept.meter.measured
    assert kept.meter == measure(CHARS, used=0, window=64_000)


def test_a_planned_meter_is_encoded_once_and_not_decoded_back_at_the_end() -> None:
    """Issue 28: the end of a call scaled the meter its record had just encoded by decoding it
    back; the planned record's own bytes now find the meter they were made from."""
    from unittest import mock

    breakdown = records._planned_breakdown(CHARS, 64_000)
    assert breakdown == planned().prompt_breakdown  # the bytes stored are unchanged
    record = msgspec_replace(planned(), prompt_breakdown=breakdown)
    usage = Usage(input=1_000, cache_read=3_000, output=80)
    end = CallEnd("c1", CallOutcome.COMMITTED)
    with mock.patch.object(records, "decode_call_meter", wraps=records.decode_call_meter) as dec:
        done = records.finished_call(
            record, end, usage=usage, answer_bytes=None, ttft_ms=None, duration_ms=None, now_ms=2
        )
    dec.assert_not_called()
    assert done.prompt_breakdown is not None
    kept = records.decode_call_meter(done.prompt_breakdown)
    assert kept.chars == CHARS and kept.meter == measure(CHARS, used=4_000, window=64_000)
    # a record read back from the store (other bytes) still decodes: the same result
    assert finish(usage) == kept


def msgspec_replace(record: LLMCallRecord, **changes: object) -> LLMCallRecord:
    import msgspec

    return msgspec.structs.replace(record, **changes)
