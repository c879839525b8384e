"""One cost on every surface (issue 26 point 2), through the real server process, on SQLite and
on PostgreSQL.

One conversation under one person token: a turn with an image and a turn canceled mid-answer
at the first prices; a restart with new prices; then a Task helper, a requested compaction
and a last turn. Every surface an operator reads shows the same number: the sum of the costs
stored with the calls (each computed once, from the prices in force when its call was made):
the dashboard's cost card, its runs, its calls, the conversation's drill-down with its
helper, `/metrics` (summed over the two processes), `cursor-byok token list --json`, and the
budget, whose refusal says what was spent. The calls made before the restart keep the first
prices, and the dashboard lists when the model's prices changed.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.access_tokens import REFRESH_S
from cursor_byok.llm.models import usd
from cursor_byok.store import open_store
from cursor_byok.store.api import LLMCallRecord
from cursor_byok.store.backends import is_postgres_url
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_compaction import sample
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    cancel,
    exec_of,
    exec_reply,
    http,
    is_text,
    run_request,
)
from tests.e2e.test_subagents import child_request, task_prompt
from tests.e2e.test_tokens import add_token, refused, token_cli
from tests.support.images import PNG
from tests.support.live import ServerProcess, server_process
from tests.support.upstream import FakeUpstream

FIRST = {"input": 10_000.0, "output": 20_000.0}  # USD per million tokens: cents per call
SECOND = {"input": 30_000.0, "output": 50_000.0}
OPERATOR = "PLANTED-operator-token-26cc"  # the operator's pages: /metrics, /dashboard
AS_OPERATOR = {"authorization": f"Bearer {OPERATOR}"}


def config_text(upstream: FakeUpstream, db: str, prices: dict[str, float]) -> str:
    table = ", ".join(f"{k} = {v}" for k, v in prices.items())
    return f"""
[server]
database = "{db}"
auth_token = "{OPERATOR}"

[providers.brain]
api = "openai-chat"
base_url = "{upstream.base_url}/v1"

[models."brain-1"]
provider = "brain"
model = "brain-1"
context_window = 128000
# Each call reserves its bound of the budget (its body, and this cap at the output price):
# without a cap the whole window would be reserved, $2,560 at the first prices.
max_output_tokens = 64
vision = true
prices = {{ {table} }}
"""


def cost_at(prices: dict[str, float], row: LLMCallRecord) -> float:
    inp, out = row.input_tokens or 0, row.output_tokens or 0
    return (inp * prices["input"] + out * prices["output"]) / 1e6


async def turn(server: ServerProcess, token: str, message: a.AgentClientMessage) -> Reader:
    async with http(server) as client:
        run = ShimRun(client, token=token)
        async with run.subscribe() as reader:
            await run.append(message)
            end = await reader.wait_end(30)
    assert end == {} and reader.turn_ended, end
    return reader


def with_image(message: a.AgentClientMessage) -> a.AgentClientMessage:
    user = message.run_request.action.user_message_action.user_message
    user.selected_context.selected_images.add(mime_type="image/png", data=PNG, path="shot.png")
    return message


async def canceled_turn(server: ServerProcess, token: str, conversation: str) -> None:
    async with http(server) as client:
        run = ShimRun(client, token=token)
        async with run.subscribe() as reader:
            await run.append(run_request("[slow 6] stop me halfway", conversation))
            await reader.wait_for(is_text)
            await run.append(cancel())
            end = await reader.wait_end(10)
    assert end["error"]["code"] == "canceled", end


async def helper_turn(server: ServerProcess, token: str, conversation: str) -> str:
    """A Task call: the IDE opens the helper's run under the same token, then answers the
    parent's exec with the helper's report. The helper's conversation id."""
    child_id = str(uuid.uuid4())
    parent = run_request(task_prompt("[helper Counting] count the files"), conversation)
    parent.run_request.selected_subagent_models.add(model_id="brain-1")
    async with http(server) as client:
        run = ShimRun(client, token=token)
        async with run.subscribe() as reader:
            await run.append(parent)
            sent = await reader.wait_for(exec_of("subagent_args"))
            args = sent.exec_server_message.subagent_args
            child = ShimRun(client, token=token)
            headers = {
                "x-parent-request-id": run.request_id,
                "x-parent-agent-tool-call-id": args.tool_call_id,
            }
            async with child.subscribe() as child_reader:
                await child.append(child_request(args, child_id), headers=headers)
                assert await child_reader.wait_end(30) == {}
            final = "".join(child_reader.texts)
            success = a.SubagentSuccess(agent_id=child_id, final_message=final, tool_call_count=1)
            await run.append(
                exec_reply(
                    sent.exec_server_message.id, subagent_result=a.SubagentResult(success=success)
                )
            )
            assert await reader.wait_end(30) == {}
    return child_id


def summarize(conversation: str) -> a.AgentClientMessage:
    req = a.AgentRunRequest(conversation_id=conversation)
    req.requested_model.model_id = "brain-1"
    req.action.summarize_action.SetInParent()
    return a.AgentClientMessage(run_request=req)


async def metrics_cost(server: ServerProcess) -> float:
    async with http(server) as client:
        text = (await client.get("/metrics", headers=AS_OPERATOR)).text
    return sample(text, "cursor_byok_llm_cost_usd_total", provider="brain", model="brain-1")


async def stored_calls(database: str) -> list[LLMCallRecord]:
    """Every call as stored, oldest first (read through the store, on either backend)."""
    store = await open_store(database)
    try:
        return sorted(await store.list_recent_llm_calls(1000), key=lambda r: r.created_at_ms)
    finally:
        await store.close()


def set_budget(database: str, budget: float) -> None:
    """The operator lowers the token's budget (in the database every process reads)."""
    sql = "UPDATE access_tokens SET budget_usd = "
    if is_postgres_url(database):
        import psycopg

        with psycopg.connect(database, autocommit=True) as pg:
            pg.execute(sql + "%s", (budget,))
        return
    with sqlite3.connect(database) as conn:
        conn.execute(sql + "?", (budget,))


async def test_every_surface_shows_the_same_cost(
    upstream: FakeUpstream, tmp_path: Path, shared_database: str
) -> None:
    db = shared_database
    config = tmp_path / "cursor-byok.toml"
    conversation = str(uuid.uuid4())
    config.write_text(config_text(upstream, db, FIRST))
    # Room for the reservations: a call holds the most it may cost first (a full window at
    # these prices, ~$2,600), then settles to its stored cost.
    secret = await asyncio.to_thread(add_token, config, "olga", "--budget-usd", "1000000")

    # At the first prices: a turn with an image, then one canceled while it streams.
    with server_process(config_text(upstream, db, FIRST), tmp_path) as server:
        await turn(server, secret, with_image(run_request("look at this", conversation)))
        await canceled_turn(server, secret, conversation)
        first_metrics = await metrics_cost(server)
    before = await stored_calls(db)
    assert [r.status for r in before] == ["committed", "canceled"]
    canceled = before[1]
    assert (canceled.output_tokens or 0) > 0 and "input" in (canceled.estimated_tokens or "")
    for row in before:
        assert row.cost_usd == pytest.approx(cost_at(FIRST, row)) and (row.cost_usd or 0) > 0

    # Restarted with new prices: a helper, a compaction, one more turn.
    with server_process(config_text(upstream, db, SECOND), tmp_path) as server:
        child = await helper_turn(server, secret, conversation)
        compacted = await turn(server, secret, summarize(conversation))
        assert "interaction_update.summary_started" in compacted.kinds
        await turn(server, secret, run_request("and now?", conversation))

        calls = await stored_calls(db)
        # The calls made before the restart were never priced again.
        assert calls[:2] == before
        later = calls[2:]
        assert {r.conversation_id for r in later} == {conversation, child}
        assert any(":summary" in r.call_id for r in later)
        for row in later:
            assert row.cost_usd == pytest.approx(cost_at(SECOND, row)) and (row.cost_usd or 0) > 0
        assert {r.token_id for r in calls} == {calls[0].token_id} != {None}
        total = sum(r.cost_usd or 0.0 for r in calls)

        metrics = first_metrics + await metrics_cost(server)
        async with http(server) as client:
            summary = (await client.get("/dashboard/api/summary", headers=AS_OPERATOR)).json()
            drill_url = f"/dashboard/api/conversation?id={conversation}"
            drill = (await client.get(drill_url, headers=AS_OPERATOR)).json()
        listed = json.loads((await asyncio.to_thread(token_cli, config, "list", "--json")).stdout)
        (olga,) = listed["tokens"]

        # The budget counts the same stored costs: just under them, the next call is refused
        # with what was spent.
        await asyncio.to_thread(set_budget, db, total * 0.999)
        await asyncio.sleep(REFRESH_S + 1.0)  # the server reads the new budget
        async with http(server) as client:
            run = ShimRun(client, token=secret)
            async with run.subscribe() as reader:
                await run.append(run_request("one more", conversation))
                end = await reader.wait_end(30)
        message, _ = refused(end, "resource_exhausted")

    surfaces: dict[str, Any] = {
        "dashboard cost card": summary["totals"]["cost_usd"],
        "dashboard runs": sum(r["cost_usd"] for r in summary["runs"]),
        "dashboard calls": sum(c["cost_usd"] for c in summary["llm_calls"]),
        "dashboard series": sum(
            p["cost_usd"] for m in summary["series"]["models"] for p in m["points"]
        ),
        "drill-down": drill["conversation"]["cost_usd"]
        + sum(h["cost_usd"] for h in drill["helpers"]),
        "/metrics": metrics,
        "token list": olga["cost_usd"],
    }
    for name, value in surfaces.items():
        assert value == pytest.approx(total, rel=1e-9), (name, value, total)
    assert f"has spent its monthly budget: {usd(total)} of" in message
    assert summary["totals"]["unpriced_calls"] == 0 and olga["unpriced_calls"] == 0
    assert len(summary["llm_calls"]) == len(calls) == olga["llm_calls"]
    # When the prices changed: the first prices until the restart, the second after.
    spans = [s for s in summary["price_changes"] if s["model"] == "brain-1"]
    assert [(s["prices"]["input"], s["prices"]["output"], s["calls"]) for s in spans] == [
        (FIRST["input"], FIRST["output"], 2),
        (SECOND["input"], SECOND["output"], len(calls) - 2),
    ]
    assert spans[0]["last_ms"] < spans[1]["first_ms"]
