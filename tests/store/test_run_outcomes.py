"""Run outcomes (migration 0004) and the per-conversation overview, on a real SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cursor_byok.store import AnyStore
from cursor_byok.store.api import LLMCallRecord, RunOutcomeRecord
from cursor_byok.store.migrate import latest_version
from cursor_byok.store.sqlite import SQLiteStore

T0 = 1_780_000_000_000


def outcome(request_id: str, conversation_id: str, at: int, **kw: object) -> RunOutcomeRecord:
    return RunOutcomeRecord(
        request_id=request_id,
        conversation_id=conversation_id,
        outcome=str(kw.pop("outcome", "ok")),
        finished_at_ms=T0 + at,
        **kw,  # type: ignore[arg-type]
    )


def call(call_id: str, conversation_id: str, at: int, **kw: object) -> LLMCallRecord:
    values: dict[str, object] = {
        "turn_id": "t1",
        "request": b"{}",
        "request_hash": "h",
        "messages_hash": "m",
        "status": "committed",
        "provider": "openai",
        "model": "gpt-test",
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_tokens": 1,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "cost_usd": 0.5,
    }
    values.update(kw)
    return LLMCallRecord(
        call_id=call_id,
        conversation_id=conversation_id,
        created_at_ms=T0 + at,
        **values,  # type: ignore[arg-type]
    )


async def commit(store: AnyStore, conversation_id: str) -> None:
    result = await store.commit_input(
        conversation_id,
        input_id="i1",
        expected_version=0,
        state=b"s",
        append_messages=[b"m1", b"m2"],
        expected_message_count=0,
        result=b"",
    )
    assert result.status == "committed"


async def test_save_replace_and_list(tmp_path: Path) -> None:
    async with await SQLiteStore.open(tmp_path / "db") as store:
        first = outcome("r1", "c1", 10, title="Fix it", model="gpt", outcome="canceled")
        assert (await store.save_run_outcome(first)).outcome == "inserted"
        # The same run ends again after a restart (resumed: no title of its own).
        again = outcome("r1", "c1", 20, title="", model="gpt", outcome="failed", error="boom")
        assert (await store.save_run_outcome(again)).outcome == "updated"
        await store.save_run_outcome(outcome("r2", "c2", 15, title="Other"))
        recent = await store.list_recent_run_outcomes(10)
        assert [r.request_id for r in recent] == ["r1", "r2"]
        assert recent[0].title == "Fix it" and recent[0].outcome == "failed"
        assert recent[0].error == "boom" and recent[0].finished_at_ms == T0 + 20
        assert [r.request_id for r in await store.list_recent_run_outcomes(1)] == ["r1"]
        assert [r.request_id for r in await store.list_conversation_run_outcomes("c2")] == ["r2"]
    conn = sqlite3.connect(tmp_path / "db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version() >= 4
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_overviews(tmp_path: Path) -> None:
    ticks = iter(range(T0 + 1000, T0 + 10_000))
    async with await SQLiteStore.open(tmp_path / "db", clock=lambda: next(ticks)) as store:
        await commit(store, "c1")
        await commit(store, "c2")
        await store.save_llm_call(call("a", "c1", 100, turn_id="t1"))
        await store.save_llm_call(call("b", "c1", 200, turn_id="t2", cost_usd=0.25))
        await store.save_llm_call(
            call("c", "c1", 300, turn_id="t2", status="failed", error="HTTP 500", cost_usd=None)
        )
        await store.save_llm_call(call("d", "c1", 400, turn_id="t3", status="streaming"))
        await store.save_run_outcome(outcome("r1", "c1", 150, title="First words", model="gpt"))
        await store.save_run_outcome(
            outcome("r2", "c1", 350, title="Later", model="gpt-b", provider="openai")
        )
        # A conversation known only from a refused run, and newer than everything else.
        await store.save_run_outcome(
            outcome("r3", "c3", 20_000, title="Hello", model="nope", error="unknown model")
        )
        listed = await store.list_conversation_overviews(10)
        assert [o.conversation_id for o in listed] == ["c3", "c2", "c1"]
        assert [o.conversation_id for o in await store.list_conversation_overviews(1)] == ["c3"]
        c1 = await store.conversation_overview("c1")
        c3 = await store.conversation_overview("c3")
        assert await store.conversation_overview("none") is None
        calls = await store.list_conversation_llm_calls("c1", 3)

    assert c1 is not None and c3 is not None
    assert (c1.title, c1.model, c1.provider) == ("First words", "gpt-b", "openai")
    assert (c1.version, c1.message_count, c1.runs, c1.failed_runs) == (1, 2, 2, 0)
    assert (c1.llm_calls, c1.turns, c1.failed_calls, c1.unpriced_calls) == (4, 3, 1, 1)
    assert (c1.input_tokens, c1.output_tokens, c1.cache_read_tokens) == (40, 20, 4)
    assert c1.cost_usd == 0.5 + 0.25 + 0.5  # the streaming call's cost is stored too
    assert (c1.last_error, c1.last_error_at_ms) == ("HTTP 500", T0 + 300)
    assert (c3.version, c3.message_count, c3.created_at_ms, c3.llm_calls) == (0, 0, None, 0)
    assert (c3.title, c3.model, c3.failed_runs, c3.last_error) == (
        "Hello",
        "nope",
        1,
        "unknown model",
    )
    assert c3.last_activity_ms == T0 + 20_000
    assert [c.call_id for c in calls] == ["d", "c", "b"]


async def test_the_latest_error_wins_between_calls_and_runs(tmp_path: Path) -> None:
    async with await SQLiteStore.open(tmp_path / "db") as store:
        await commit(store, "c1")
        await store.save_llm_call(call("a", "c1", 100, status="failed", error="call broke"))
        await store.save_run_outcome(outcome("r1", "c1", 50, outcome="failed", error="older"))
        first = await store.conversation_overview("c1")
        await store.save_run_outcome(outcome("r2", "c1", 500, outcome="failed", error="newer"))
        second = await store.conversation_overview("c1")
    assert first is not None and first.last_error == "call broke"
    assert second is not None and second.last_error == "newer"


async def test_price_spans_and_unpriced_runs_on_both_backends(store: AnyStore) -> None:
    """The prices stored with each call, grouped per model in order of first use (what the
    dashboard lists as price changes), and a run's unpriced count, kept as written."""
    await commit(store, "c1")
    first, second = '{"input":1.0}', '{"input":2.0}'
    for call_id, at, prices in (
        ("a", 10, None),
        ("b", 20, first),
        ("c", 30, first),
        ("d", 40, second),
    ):
        cost = None if prices is None else 0.5
        await store.save_llm_call(call(call_id, "c1", at, prices=prices, cost_usd=cost))
    await store.save_llm_call(call("e", "c1", 50, model="other", prices=second))
    spans = [
        (s.model, s.prices, s.first_ms, s.last_ms, s.calls) for s in await store.list_price_spans()
    ]
    assert spans == [
        ("gpt-test", None, T0 + 10, T0 + 10, 1),
        ("gpt-test", first, T0 + 20, T0 + 30, 2),
        ("gpt-test", second, T0 + 40, T0 + 40, 1),
        ("other", second, T0 + 50, T0 + 50, 1),
    ]
    assert (await store.get_llm_call("b")) == call("b", "c1", 20, prices=first, cost_usd=0.5)
    await store.save_run_outcome(outcome("r1", "c1", 60, llm_calls=4, unpriced_calls=1))
    (run,) = await store.list_recent_run_outcomes(5)
    assert run.unpriced_calls == 1
