"""Failed runs on the dashboard (issue 13, point 15) and conversations that say what they are
(point 17): run summaries go through the real hook into a real SQLite file, and the dashboard's
data is read back from it."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

from cursor_byok.llm.types import Usage
from cursor_byok.observability.dashboard import conversation_data, dashboard_data
from cursor_byok.observability.routes import Observability
from cursor_byok.store.api import RunOutcomeRecord
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime.summary import RunSummary

from .helpers import ALL_SECRETS, ANTHROPIC_KEY, call_record, planted_config, seed_store

UNKNOWN = "unknown model 'gpt-9'; this server offers: claude, gem, gpt"
XSS_TITLE = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2> hi"


def failed_run(request_id: str = "req-bad", conversation_id: str = "conv-gamma-0003") -> RunSummary:
    """What the runtime hands over for a run refused for its model: no call, no commit."""
    return RunSummary(
        request_id=request_id,
        conversation_id=conversation_id,
        outcome="failed",
        error=UNKNOWN,
        title="Fix the flaky test",
        requested_model="gpt-9",
    )


async def test_a_failed_run_without_calls_is_an_error_with_its_message(tmp_path: Path) -> None:
    config = planted_config()
    async with await SQLiteStore.open(tmp_path / "db.sqlite") as store:
        obs = Observability(config, store)
        obs.on_run_end(failed_run())
        await obs.aclose()
        data = await dashboard_data(store, config)

    assert data["llm_calls"] == []  # what the dashboard counted before: "0 errors"
    totals = data["totals"]
    assert totals["runs"] == 1 and totals["failed_runs"] == 1
    (run,) = data["runs"]
    assert run["failed"] and run["outcome"] == "failed" and run["error"] == UNKNOWN
    assert run["model"] == "gpt-9" and run["title"] == "Fix the flaky test"
    # The conversation it named is listed too, with that error as its last one.
    (conv,) = data["conversations"]
    assert conv["id"] == "conv-gamma-0003" and conv["last_error"] == UNKNOWN
    assert conv["failed_runs"] == 1 and conv["message_count"] == 0


async def test_ok_and_canceled_runs_are_not_errors(tmp_path: Path) -> None:
    config = planted_config()
    async with await SQLiteStore.open(tmp_path / "db.sqlite") as store:
        obs = Observability(config, store)
        obs.on_run_end(RunSummary(request_id="r-ok", conversation_id="c", outcome="ok"))
        obs.on_run_end(
            RunSummary(request_id="r-x", conversation_id="c", outcome="canceled", error="bye")
        )
        obs.on_run_end(
            RunSummary(request_id="r-e", conversation_id="c", outcome="error", error="internal")
        )
        await obs.aclose()
        data = await dashboard_data(store, config)
    runs = {r["request_id"]: r for r in data["runs"]}
    assert [runs[k]["failed"] for k in ("r-ok", "r-x", "r-e")] == [False, False, True]
    assert runs["r-x"]["error"] is None and runs["r-e"]["error"] == "internal"
    assert data["totals"]["failed_runs"] == 1


async def test_conversations_show_title_model_turns_tokens_cost_and_last_error(
    tmp_path: Path,
) -> None:
    now = int(time.time() * 1000)
    config = planted_config()
    ticks = itertools.count(now)
    async with await SQLiteStore.open(tmp_path / "db.sqlite", clock=lambda: next(ticks)) as store:
        await seed_store(store, now)
        await store.save_run_outcome(
            RunOutcomeRecord(
                request_id="r-1",
                conversation_id="conv-alpha-0001",
                outcome="ok",
                finished_at_ms=now - 29 * 60_000,
                title="Refactor the parser",
                model="gpt",
                provider="openai",
            )
        )
        await store.save_run_outcome(
            RunOutcomeRecord(
                request_id="r-2",
                conversation_id="conv-alpha-0001",
                outcome="ok",
                finished_at_ms=now - 19 * 60_000,
                title="and now the tests",
                model="gpt",
                provider="openai",
            )
        )
        await store.save_llm_call(
            call_record("call-7", conversation_id="conv-alpha-0001", created_at_ms=now - 9_000)
        )
        obs = Observability(config, store)
        obs.on_run_end(
            RunSummary(
                request_id="r-3",
                conversation_id="conv-beta-0002",
                outcome="failed",
                error=f"anthropic HTTP 529: overloaded (key {ANTHROPIC_KEY})",
                title=XSS_TITLE,
                model="claude",
                provider="anthropic",
                llm_calls=1,
                usage=Usage(input=3, output=0),
            )
        )
        await obs.aclose()
        data = await dashboard_data(store, config)
        drill = await conversation_data(store, config, "conv-alpha-0001")
        beta = await conversation_data(store, config, "conv-beta-0002")
        missing = await conversation_data(store, config, "no-such-conversation")

    convs = {c["id"]: c for c in data["conversations"]}
    alpha = convs["conv-alpha-0001"]
    assert alpha["title"] == "Refactor the parser"  # its first run's, not its latest
    assert alpha["model"] == "gpt" and alpha["provider"] == "openai"
    assert alpha["turns"] == 1  # every seeded call is in turn-1
    assert alpha["llm_calls"] == 5 and alpha["runs"] == 2
    assert alpha["tokens"] == (1200 + 300) + (200 + 450 + 1500 + 100) + 13 + (100 + 20 + 300)
    assert abs(alpha["cost_usd"] - (0.0048 + 0.0051 + 0.00001 + 0.001)) < 1e-12
    assert alpha["last_error"] is None and alpha["unpriced_calls"] == 0
    b = convs["conv-beta-0002"]
    # The latest error of the conversation: the failed run's, after the failed call's.
    assert b["last_error"].startswith("anthropic HTTP 529: overloaded")
    assert b["title"] == XSS_TITLE  # kept as text; the page inserts it as text
    assert b["unpriced_calls"] == 1 and b["failed_calls"] == 1 and b["failed_runs"] == 1

    assert drill is not None and missing is None
    assert drill["conversation"]["id"] == "conv-alpha-0001"
    assert [c["call_id"] for c in drill["llm_calls"]] == [
        "call-7",
        "call-6",
        "call-5",
        "call-2",
        "call-1",
    ]
    assert [r["request_id"] for r in drill["runs"]] == ["r-2", "r-1"]
    assert beta is not None and [r["error"] is not None for r in beta["runs"]] == [True]

    for text in (json.dumps(data), json.dumps(drill), json.dumps(beta)):
        for secret in ALL_SECRETS:
            assert secret not in text
