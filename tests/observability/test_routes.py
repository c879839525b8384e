from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cursor_byok.observability.routes import GET_ROUTES, Observability
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime.summary import RunSummary

from .helpers import ANTHROPIC_KEY, call_record, planted_config, seed_store


async def test_routes_and_hooks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with await SQLiteStore.open(tmp_path / "db") as store:
        await seed_store(store, 1_780_000_000_000)
        obs = Observability(planted_config(), store)
        obs.metrics.bind_active_runs(lambda: 2)
        obs.observe_rpc("/agent.v1.AgentService/Run", "ok")
        obs.on_llm_call(call_record("x"))
        with caplog.at_level(logging.INFO, logger="cursor_byok.runs"):
            obs.on_run_end(RunSummary(request_id="req-9", model="gpt", outcome="ok"))
        assert any("request_id=req-9" in r.getMessage() for r in caplog.records)

        metrics = await obs.get("/metrics")
        assert metrics is not None and metrics.status == 200
        text = metrics.body.decode()
        assert "cursor_byok_active_runs 2.0" in text
        assert (
            'cursor_byok_llm_calls_total{model="gpt-test",outcome="ok",provider="openai"} 1.0'
            in text
        )
        assert 'cursor_byok_runs_total{model="gpt",outcome="ok",provider="unknown"} 1.0' in text

        page = await obs.get("/dashboard")
        assert page is not None and page.content_type.startswith("text/html")
        assert dict(page.headers)["content-security-policy"].startswith("default-src 'none'")
        assert obs.is_public("/dashboard") and not obs.is_public("/metrics")
        assert not obs.is_public("/dashboard/api/summary")

        summary = await obs.get("/dashboard/api/summary", "limit=2")
        assert summary is not None and summary.status == 200
        assert len(json.loads(summary.body)["llm_calls"]) == 2
        bad = await obs.get("/dashboard/api/summary", "limit=x")
        assert bad is not None and bad.status == 400
        assert await obs.get("/nope") is None
        root = await obs.get("/")
        assert root is not None and root.status == 200 and b"/dashboard" in root.body
        assert obs.is_public("/")
        assert set(GET_ROUTES) == {
            "/",
            "/metrics",
            "/dashboard",
            "/dashboard/",
            "/dashboard/api/summary",
            "/dashboard/api/conversation",
        }
        assert not obs.is_public("/dashboard/api/conversation")

        # The run summary above was stored too: the drill-down finds its conversation.
        await obs.aclose()
        assert len(json.loads(summary.body)["runs"]) <= 2
        conv = await obs.get("/dashboard/api/conversation", "id=conv-alpha-0001&limit=2")
        assert conv is not None and conv.status == 200
        body = json.loads(conv.body)
        assert body["conversation"]["id"] == "conv-alpha-0001"
        assert len(body["llm_calls"]) == 2
        for query, status in (("", 400), ("id=", 400), ("id=x&limit=y", 400), ("id=nope", 404)):
            reply = await obs.get("/dashboard/api/conversation", query)
            assert reply is not None and reply.status == status, query


def test_hooks_never_raise_into_the_runner(caplog: pytest.LogCaptureFixture) -> None:
    obs = Observability(planted_config(), store=None)  # type: ignore[arg-type]

    def broken(*_: object) -> None:
        raise RuntimeError("metrics broke")

    obs.metrics.observe_llm_call = broken  # type: ignore[method-assign]
    obs.metrics.observe_run = broken  # type: ignore[method-assign]
    obs.metrics.observe_rpc = broken  # type: ignore[method-assign]
    obs.on_llm_call(call_record("y"))
    obs.on_run_end(RunSummary(request_id="r"))
    obs.observe_rpc("/a.b.C/D", "ok")
    assert sum("metrics broke" in (r.exc_text or "") for r in caplog.records) == 3


async def test_an_outcome_stored_with_the_answer_is_not_written_again(tmp_path: Path) -> None:
    """The runtime wrote the row with the commit of the turn's answer (`outcome_row`): the
    run's end writes it again only if the run ended otherwise (a cancel after that commit),
    replacing it."""
    async with await SQLiteStore.open(tmp_path / "db") as store:
        obs = Observability(planted_config(), store)
        ok = RunSummary(request_id="r1", outcome="ok", title=f"hi {ANTHROPIC_KEY}")
        row = obs.outcome_row(ok, 1_780_000_000_000)
        assert (row.request_id, row.outcome, row.finished_at_ms) == ("r1", "ok", 1_780_000_000_000)
        assert ANTHROPIC_KEY not in row.title  # scrubbed like a row written at the run's end
        await store.save_run_outcome(row)
        ok.outcome_stored = "ok"
        obs.on_run_end(ok)
        await obs.aclose()
        assert await store.list_recent_run_outcomes() == (row,)
        canceled = RunSummary(request_id="r1", outcome="canceled", outcome_stored="ok")
        obs.on_run_end(canceled)
        await obs.aclose()
        (stored,) = await store.list_recent_run_outcomes()
        assert stored.outcome == "canceled"
