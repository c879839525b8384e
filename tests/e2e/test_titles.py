"""Chat titles through the real server (issue 26 point 4): NameAgent asks `[server]
title_model` within `title_timeout_s`, falls back to the text rule on a timeout or a failure,
and records and prices the call like any other model call, under the caller's token; without a
title model the text rule answers and no call is made. A run's own title (the dashboard's)
skips the system reminder a client puts first."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cursor_byok.rpc_backend import TITLE_CONVERSATION
from cursor_byok.transport.cursor.proto import agent_pb2
from cursor_byok.transport.cursor.titles import agent_title, short_title
from tests.e2e.test_crash_recovery import db_reader
from tests.e2e.test_shim import ShimRun, run_request
from tests.e2e.test_tokens import OUTPUT_CAP, OUTPUT_PRICE, add_token
from tests.e2e.test_tokens import config_text as tokens_config
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, server_process
from tests.support.upstream import FakeUpstream

# The brain's answer is 100 prompt tokens, 40 of them cached: 60 input tokens, $0.60 a call.
INPUT_PRICE = 10_000.0
CALL_COST = 0.60


def config_text(upstream: FakeUpstream, db: Path, *, auth_token: str | None) -> str:
    """tests/e2e/test_tokens.py's server, its models priced by their input instead."""
    text = tokens_config(upstream, db, auth_token=auth_token)
    text = text.replace(f"max_output_tokens = {OUTPUT_CAP}\n", "")
    return text.replace(f"output = {OUTPUT_PRICE}", f"input = {INPUT_PRICE}")


NAME_AGENT = "/agent.v1.AgentService/NameAgent"
REMINDER = "<system-reminder>\nYou are in oh-my-pi.\n</system-reminder>\n"


@pytest.fixture
def titled(upstream: FakeUpstream, tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    db = tmp_path / "byok.db"
    text = config_text(upstream, db, auth_token=None).replace(
        "[server]", '[server]\ntitle_model = "composer"\ntitle_timeout_s = 1.5', 1
    )
    config = tmp_path / "cursor-byok.toml"
    config.write_text(text)
    with server_process(text, tmp_path) as srv:
        yield srv, config


async def name(server: ServerProcess, message: str, token: str | None = None) -> str:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        reply: agent_pb2.NameAgentResponse = await cc.unary(
            http,
            NAME_AGENT,
            agent_pb2.NameAgentRequest(user_message=message),
            agent_pb2.NameAgentResponse,
            token=token,
        )
    return reply.name


def title_calls(db: Path) -> list[tuple[str, float | None, str | None, str]]:
    with db_reader(db) as conn:
        rows = conn.execute(
            "SELECT status, cost_usd, token_id, model FROM llm_calls "
            "WHERE conversation_id = ? ORDER BY created_at_ms",
            (TITLE_CONVERSATION,),
        ).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


async def test_the_title_model_names_the_chat_and_is_charged(
    titled: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, config = titled
    secret = await asyncio.to_thread(add_token, config, "erin")
    await asyncio.sleep(2.5)  # the server sees the token
    # The model is asked with the person's own words (the reminder left out); the brain
    # answers "You said: <words>".
    named = await name(server, REMINDER + "Fix the login bug", token=secret)
    assert named == short_title("You said: Fix the login bug") != agent_title("Fix the login bug")
    with db_reader(tmp_path / "byok.db") as conn:
        erin = conn.execute("SELECT token_id FROM access_tokens WHERE name = 'erin'").fetchone()[0]
        sent = conn.execute(
            "SELECT request FROM llm_calls WHERE conversation_id = ?", (TITLE_CONVERSATION,)
        ).fetchone()[0]
    # Recorded like any call: its provider's upstream model name (what the dashboard groups by).
    assert title_calls(tmp_path / "byok.db") == [
        ("committed", pytest.approx(CALL_COST), erin, "brain-1")
    ]
    assert b"system-reminder" not in bytes(sent)
    # Slower than the timeout: the text rule; the call is recorded as canceled.
    slow = "[slow 4] Rename the module"
    assert await name(server, slow, token=secret) == agent_title(slow)
    # A provider that refuses the request: the text rule; the call is recorded as failed.
    failing = "[overflow] Update the docs"
    assert await name(server, failing, token=secret) == agent_title(failing)
    statuses = [c[0] for c in title_calls(tmp_path / "byok.db")]
    assert statuses == ["committed", "canceled", "failed"], statuses
    # The timed-out call is charged like any call stopped mid-answer: its input estimated
    # (the provider had not counted it yet), at the title model's prices.
    with db_reader(tmp_path / "byok.db") as conn:
        canceled = conn.execute(
            "SELECT input_tokens, estimated_tokens, cost_usd FROM llm_calls "
            "WHERE conversation_id = ? AND status = 'canceled'",
            (TITLE_CONVERSATION,),
        ).fetchone()
    assert canceled[0] > 0 and "input" in canceled[1]
    assert canceled[2] == pytest.approx(canceled[0] * INPUT_PRICE / 1e6)
    # The token's spend counts the title calls (budgets sum the calls of a token).
    with db_reader(tmp_path / "byok.db") as conn:
        spent = conn.execute(
            "SELECT SUM(cost_usd) FROM llm_calls WHERE token_id = ?", (erin,)
        ).fetchone()[0]
    assert spent == pytest.approx(CALL_COST + canceled[2])


async def test_a_spent_budget_names_the_chat_by_the_text_rule(
    titled: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    """The title call is charged like any call, and limited like one: it reserves the bound of
    its cost (its request's bytes / 3 at $0.01 a token: about $1.2; its output is free here)
    with its record; once that does not fit the token's budget, NameAgent answers by the text
    rule and asks no model."""
    server, config = titled
    secret = await asyncio.to_thread(add_token, config, "finn", "--budget-usd", "1.5")
    await asyncio.sleep(2.5)  # the server sees the token
    first = await name(server, "Fix the login bug", token=secret)
    assert first == short_title("You said: Fix the login bug")  # $0 spent of $1.50: asked
    assert await name(server, "Write the release notes", token=secret) == agent_title(
        "Write the release notes"
    )  # $0.60 spent, and the bound does not fit: not asked
    assert [c[0] for c in title_calls(tmp_path / "byok.db")] == ["committed"]
    assert (
        "title model composer-test not asked: token 'finn' has too little of its monthly "
        "budget left"
    ) in server.log()


async def test_without_a_title_model_the_text_rule_names_the_chat(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    db = tmp_path / "byok.db"
    with server_process(config_text(upstream, db, auth_token=None), tmp_path) as server:
        assert await name(server, REMINDER + "Fix the login bug") == "Fix the login bug"
        # The run's own title, as the dashboard shows it, skips the reminder too.
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            run = ShimRun(http)
            async with run.subscribe() as reader:
                await run.send(run_request(REMINDER + "Refactor the parser module"))
                assert await reader.wait_end() == {}
        await asyncio.sleep(0.5)
        with db_reader(db) as conn:
            titles = [r[0] for r in conn.execute("SELECT title FROM run_outcomes").fetchall()]
    assert titles == ["Refactor the parser module"]
    assert title_calls(db) == []
