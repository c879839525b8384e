"""The dashboard's tokens per person: each active token's limits and this UTC month's use,
by name only (no secret, hash or id), in the summary JSON and rendered by the page."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from cursor_byok.observability.dashboard import dashboard_html, dashboard_json
from cursor_byok.observability.dashboard_tokens import month_bounds
from cursor_byok.store.api import AccessTokenRecord, LLMCallRecord
from cursor_byok.store.sqlite import SQLiteStore

from .helpers import planted_config


def call(call_id: str, token_id: str, at_ms: int, cost: float) -> LLMCallRecord:
    return LLMCallRecord(
        call_id=call_id,
        conversation_id="c1",
        turn_id="t1",
        request=b"{}",
        request_hash=hashlib.sha256(b"{}").hexdigest(),
        messages_hash="m" * 64,
        status="committed",
        created_at_ms=at_ms,
        input_tokens=10,
        output_tokens=2,
        cost_usd=cost,
        token_id=token_id,
    )


async def test_tokens_with_this_months_use(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    start, _, month = month_bounds(now)
    async with await SQLiteStore.open(tmp_path / "db") as store:
        for name, budget in (("alice", 5.0), ("bob", None), ("gone", None)):
            await store.add_access_token(
                AccessTokenRecord(
                    token_id=f"tok_{name}",
                    name=name,
                    secret_hash=f"{name}-hash-value",
                    created_at_ms=now,
                    budget_usd=budget,
                    models=("brain-1",) if name == "alice" else (),
                )
            )
        await store.revoke_access_token("gone", now)
        calls = (call("a1", "tok_alice", now, 1.5), call("a0", "tok_alice", start - 1, 9.0))
        await store.commit_input(
            "c1",
            input_id="i0",
            expected_version=0,
            state=b"s",
            append_messages=(),
            expected_message_count=0,
            result=b"r",
            llm_calls=calls,
        )
        raw = await dashboard_json(store, planted_config())
    assert b"hash-value" not in raw and b"tok_" not in raw
    tokens = json.loads(raw)["tokens"]
    assert tokens["month"] == month
    alice, bob = tokens["tokens"]
    assert (alice["name"], alice["models"], alice["budget_usd"]) == ("alice", ["brain-1"], 5.0)
    assert (alice["llm_calls"], alice["cost_usd"], alice["input_tokens"]) == (1, 1.5, 10)
    assert (bob["name"], bob["llm_calls"], bob["cost_usd"]) == ("bob", 0, 0.0)
    page = dashboard_html().decode()
    assert 'id="token-table"' in page and "renderTokens(data.tokens" in page
