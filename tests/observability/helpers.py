"""Records and configs shared by the observability tests."""

from __future__ import annotations

import asyncio

from cursor_byok.config import Config, parse_config
from cursor_byok.store.api import CallStatus, LLMCallRecord

OPENAI_KEY = "sk-proj-PLANTEDopenaiKEY0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-api03-PLANTEDanthropicKEY987654321"
GEMINI_KEY = "AIzaSyPLANTEDgeminiKEY_0123456789xyz"
AUTH_TOKEN = "srv-token-PLANTED-5f2e9c1d"
HEADER_SECRET = "hdr-secret-PLANTED-77aa"
ALL_SECRETS = (OPENAI_KEY, ANTHROPIC_KEY, GEMINI_KEY, AUTH_TOKEN, HEADER_SECRET)

CONFIG_TOML = """
[server]
auth_token = "srv-token-PLANTED-5f2e9c1d"

[providers.openai]
api = "openai-chat"
api_key_env = "TEST_OPENAI_KEY"
headers = { "X-Custom-Auth" = "hdr-secret-PLANTED-77aa", "X-Title" = "cursor-byok" }

[providers.anthropic]
api = "anthropic"
api_key = "sk-ant-api03-PLANTEDanthropicKEY987654321"

[providers.gemini]
api = "gemini"
api_key_env = "TEST_GEMINI_KEY"

[models.gpt]
provider = "openai"
model = "gpt-test"
name = "GPT Test"
prices = { input = 2.0, output = 8.0, cache_read = 0.5 }

[models.claude]
provider = "anthropic"
model = "claude-test"

[models.gem]
provider = "gemini"
model = "gemini-test"
"""


def planted_config() -> Config:
    return parse_config(
        CONFIG_TOML, env={"TEST_OPENAI_KEY": OPENAI_KEY, "TEST_GEMINI_KEY": GEMINI_KEY}
    )


def call_record(
    call_id: str,
    *,
    status: CallStatus = "committed",
    conversation_id: str = "conv-1",
    provider: str = "openai",
    model: str = "gpt-test",
    created_at_ms: int = 1_780_000_000_000,
    input_tokens: int = 100,
    output_tokens: int = 20,
    cache_read: int = 300,
    cache_write: int = 0,
    reasoning: int = 5,
    ttft_ms: int | None = 250,
    duration_ms: int | None = 1200,
    cost_usd: float | None = 0.001,
    error: str | None = None,
    prices: str | None = None,
) -> LLMCallRecord:
    final = status in ("committed", "failed", "canceled")
    return LLMCallRecord(
        call_id=call_id,
        conversation_id=conversation_id,
        turn_id="turn-1",
        request=b'{"model":"x"}',
        request_hash="h" * 64,
        messages_hash="m" * 64,
        status=status,
        created_at_ms=created_at_ms,
        provider=provider,
        model=model,
        api="openai-chat",
        input_tokens=input_tokens if final else None,
        output_tokens=output_tokens if final else None,
        cache_read_tokens=cache_read if final else None,
        cache_write_tokens=cache_write if final else None,
        reasoning_tokens=reasoning if final else None,
        ttft_ms=ttft_ms if final else None,
        duration_ms=duration_ms if final else None,
        cost_usd=cost_usd if final else None,
        error=error,
        finished_at_ms=created_at_ms + (duration_ms or 0) if final else None,
        prices=prices,
    )


async def seed_store(store: object, now_ms: int) -> list[LLMCallRecord]:
    """Two conversations and five calls over the last 30 minutes: two models, one failure
    (whose error text echoes a planted key), one canceled call and one still streaming."""
    from cursor_byok.store.sqlite import SQLiteStore

    assert isinstance(store, SQLiteStore)
    for conv, n in (("conv-alpha-0001", 3), ("conv-beta-0002", 1)):
        result = await store.commit_input(
            conv,
            input_id="in-1",
            expected_version=0,
            state=b"{}",
            append_messages=[b'{"role":"user"}'] * n,
            expected_message_count=0,
            result=b"",
        )
        assert result.status == "committed"
        # The next conversation commits in a later millisecond: pages order conversations by
        # their last commit's time, and two commits in one millisecond tie (then by id).
        await asyncio.sleep(0.003)
    minute = 60_000
    records = [
        call_record(
            "call-1",
            conversation_id="conv-alpha-0001",
            created_at_ms=now_ms - 30 * minute,
            input_tokens=1200,
            output_tokens=300,
            cache_read=0,
            cost_usd=0.0048,
        ),
        call_record(
            "call-2",
            conversation_id="conv-alpha-0001",
            created_at_ms=now_ms - 20 * minute,
            input_tokens=200,
            output_tokens=450,
            cache_read=1500,
            cache_write=100,
            cost_usd=0.0051,
            # The one call stored with its prices (the others: made before 0013).
            prices='{"input":2.0,"output":8.0,"cache_read":0.5}',
        ),
        call_record(
            "call-3",
            conversation_id="conv-beta-0002",
            created_at_ms=now_ms - 12 * minute,
            provider="anthropic",
            model="claude-test",
            input_tokens=900,
            output_tokens=0,
            cache_read=0,
            cost_usd=None,
            ttft_ms=None,
            duration_ms=800,
            status="failed",
            error=f"anthropic HTTP 401: invalid x-api-key {ANTHROPIC_KEY}",
        ),
        call_record(
            "call-4",
            conversation_id="conv-beta-0002",
            created_at_ms=now_ms - 5 * minute,
            provider="anthropic",
            model="claude-test",
            input_tokens=50,
            output_tokens=700,
            cache_read=2500,
            cache_write=40,
            cost_usd=0.0123,
        ),
        call_record(
            "call-5",
            conversation_id="conv-alpha-0001",
            created_at_ms=now_ms - minute,
            status="canceled",
            input_tokens=10,
            output_tokens=3,
            cache_read=0,
            cost_usd=0.00001,
        ),
        call_record(
            "call-6",
            conversation_id="conv-alpha-0001",
            created_at_ms=now_ms - 10_000,
            status="streaming",
        ),
    ]
    for r in records:
        saved = await store.save_llm_call(r)
        assert saved.outcome == "inserted", saved
    return records
