from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

from cursor_byok.observability.dashboard import (
    BUCKET_SIZES_MS,
    bucket_size,
    conversation_data,
    dashboard_data,
    dashboard_html,
    dashboard_json,
)
from cursor_byok.store.sqlite import SQLiteStore

from .helpers import ALL_SECRETS, planted_config, seed_store


def test_html_is_self_contained() -> None:
    html = dashboard_html().decode()
    assert html.startswith("<!doctype html>")
    assert 'apiUrl("summary")' in html and 'apiUrl("conversation")' in html
    assert "dashboard_script.html" not in html and html.count("<script>") == 1  # inlined
    # No external resource of any kind: the machine (and many users) have no internet.
    for needle in ("http://", "https://", "//cdn", "src=", "@import", "url("):
        assert needle not in html, needle
    assert html.count("<link") == 1 and '<link rel="icon" href="data:,">' in html


def test_bucket_size_follows_the_span() -> None:
    assert bucket_size(0) == 60_000
    assert bucket_size(30 * 60_000) == 60_000
    assert bucket_size(3 * 3_600_000) == 5 * 60_000
    assert bucket_size(2 * 86_400_000) == 3_600_000
    assert bucket_size(365 * 86_400_000) == BUCKET_SIZES_MS[-1]


async def test_dashboard_data_from_a_real_store(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    config = planted_config()
    # A store clock that always moves: two commits in one millisecond would tie on
    # updated_at_ms and make the newest-first order depend on the ids.
    ticks = itertools.count(now)
    async with await SQLiteStore.open(tmp_path / "db.sqlite", clock=lambda: next(ticks)) as store:
        await seed_store(store, now)
        data = await dashboard_data(store, config, limit=100)
        raw = await dashboard_json(store, config)

    assert [c["id"] for c in data["conversations"]] == ["conv-beta-0002", "conv-alpha-0001"]
    assert data["conversations"][1]["message_count"] == 3
    assert data["runs"] == []  # the seed has calls only

    calls = {c["call_id"]: c for c in data["llm_calls"]}
    assert len(calls) == 6
    assert next(c["call_id"] for c in data["llm_calls"]) == "call-6"  # newest first
    c2 = calls["call-2"]
    assert c2["outcome"] == "ok" and c2["conversation_id"] == "conv-alpha-0001"
    assert (c2["input_tokens"], c2["output_tokens"]) == (200, 450)
    assert (c2["cache_read_tokens"], c2["cache_write_tokens"], c2["reasoning_tokens"]) == (
        1500,
        100,
        5,
    )
    assert c2["cache_hit_ratio"] == round(1500 / 1800, 4)
    assert c2["ttft_ms"] == 250 and c2["duration_ms"] == 1200 and c2["cost_usd"] == 0.0051
    c3 = calls["call-3"]
    assert c3["outcome"] == "error" and c3["error"].startswith("anthropic HTTP 401")
    assert "***" in c3["error"]
    assert calls["call-5"]["outcome"] == "canceled"
    assert calls["call-6"]["outcome"] == "streaming" and calls["call-6"]["input_tokens"] is None

    totals = data["totals"]
    assert totals["calls"] == 6 and totals["failed_calls"] == 1
    assert totals["runs"] == 0 and totals["failed_runs"] == 0
    assert totals["unpriced_calls"] == 1  # call-3: claude-test has no prices
    assert c3["unpriced"] and not c2["unpriced"] and not calls["call-6"]["unpriced"]
    assert totals["input_tokens"] == 1200 + 200 + 900 + 50 + 10
    assert abs(totals["cost_usd"] - (0.0048 + 0.0051 + 0.0123 + 0.00001)) < 1e-12

    series = data["series"]
    assert series["bucket_ms"] == 60_000
    keys = [m["key"] for m in series["models"]]
    assert keys == ["anthropic/claude-test", "openai/gpt-test"]
    # Priced from what was stored: claude-test's failed call has no cost, its later one has.
    assert [m["priced"] for m in series["models"]] == [True, True]
    assert [m["unpriced_calls"] for m in series["models"]] == [1, 0]
    assert series["models"][0]["model_ids"] == ["claude"]
    for m in series["models"]:
        ts = [p["t"] for p in m["points"]]
        assert ts == sorted(ts) and all(b - a == 60_000 for a, b in itertools.pairwise(ts))
    gpt = series["models"][1]["points"]
    assert sum(p["tokens"] for p in gpt) == (1200 + 300) + (200 + 450 + 1500 + 100) + 13
    assert abs(sum(p["cost_usd"] for p in gpt) - (0.0048 + 0.0051 + 0.00001)) < 1e-12
    claude = series["models"][0]["points"]
    assert sum(p["errors"] for p in claude) == 1

    text = raw.decode()
    assert json.loads(text)["totals"]["calls"] == 6
    for secret in ALL_SECRETS:
        assert secret not in text


async def test_empty_store(tmp_path: Path) -> None:
    async with await SQLiteStore.open(tmp_path / "db.sqlite") as store:
        data = await dashboard_data(store, planted_config())
    assert data["llm_calls"] == [] and data["conversations"] == []
    assert data["series"]["models"] == [] and data["totals"]["calls"] == 0
    assert [m["id"] for m in data["models"]] == ["gpt", "claude", "gem"]


def test_a_call_canceled_mid_answer_shows_which_counts_are_estimates() -> None:
    import hashlib

    from cursor_byok.observability.dashboard_rows import call_row
    from cursor_byok.store.api import LLMCallRecord

    record = LLMCallRecord(
        call_id="c:1:llm1",
        conversation_id="c",
        turn_id="c:1",
        request=b"{}",
        request_hash=hashlib.sha256(b"{}").hexdigest(),
        messages_hash="m" * 64,
        status="canceled",
        created_at_ms=1,
        input_tokens=1500,
        output_tokens=42,
        error="canceled by the client",
        estimated_tokens="input,output",
    )
    row = call_row(record, ALL_SECRETS)
    assert row["status"] == "canceled" and row["estimated_tokens"] == "input,output"
    assert (row["input_tokens"], row["output_tokens"]) == (1500, 42)
    assert row["error"] == "canceled by the client"
    assert "estimated: the call ended before the provider counted" in dashboard_html().decode()


async def test_stored_costs_are_never_priced_again_and_price_changes_show(tmp_path: Path) -> None:
    """gpt has prices in the configuration now; its first call was made before it had any
    (stored without prices or cost), its later ones at two sets of prices. The dashboard
    sums what was stored: the first call stays unpriced on every row and card, and the
    prices list says when each set came into force."""
    import msgspec

    from cursor_byok.llm.models import Prices, encode_prices
    from cursor_byok.store.api import RunOutcomeRecord

    from .helpers import call_record

    now = int(time.time() * 1000)
    first, second = Prices(input=1.0, output=4.0), Prices(input=2.0, output=8.0, cache_read=0.5)
    async with await SQLiteStore.open(tmp_path / "db.sqlite") as store:
        await store.commit_input(
            "conv-p",
            input_id="in-1",
            expected_version=0,
            state=b"{}",
            append_messages=[b"{}"],
            expected_message_count=0,
            result=b"",
        )
        made = [
            ("p-1", now - 30_000, None, None),
            ("p-2", now - 20_000, first, 0.002),
            ("p-3", now - 10_000, second, 0.004),
        ]
        for call_id, at, prices, cost in made:
            record = call_record(call_id, conversation_id="conv-p", created_at_ms=at, cost_usd=cost)
            await store.save_llm_call(msgspec.structs.replace(record, prices=encode_prices(prices)))
        await store.save_run_outcome(
            RunOutcomeRecord(
                request_id="r-1",
                conversation_id="conv-p",
                outcome="ok",
                finished_at_ms=now,
                llm_calls=3,
                cost_usd=0.006,
                unpriced_calls=1,
            )
        )
        data = await dashboard_data(store, planted_config())
        drill = await conversation_data(store, planted_config(), "conv-p")

    calls = {c["call_id"]: c for c in data["llm_calls"]}
    assert calls["p-1"]["cost_usd"] is None and calls["p-1"]["unpriced"]  # not re-priced
    assert [calls[c]["cost_usd"] for c in ("p-2", "p-3")] == [0.002, 0.004]
    assert data["totals"]["cost_usd"] == 0.006 and data["totals"]["unpriced_calls"] == 1
    (run,) = data["runs"]
    assert run["cost_usd"] == 0.006 and run["unpriced"] and run["unpriced_calls"] == 1
    assert drill is not None
    assert drill["conversation"]["cost_usd"] == 0.006
    assert drill["conversation"]["unpriced_calls"] == 1
    changes = [(s["prices"], s["first_ms"], s["calls"]) for s in data["price_changes"]]
    assert changes == [
        (None, now - 30_000, 1),
        (msgspec.structs.asdict(first), now - 20_000, 1),
        (msgspec.structs.asdict(second), now - 10_000, 1),
    ]
    (series,) = data["series"]["models"]
    assert series["prices"] == data["price_changes"] and series["unpriced_calls"] == 1
