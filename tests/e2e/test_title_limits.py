"""Title calls (NameAgent) under a person token's limits across two server processes on one
database (issue 25's leftover): each title call reserves the bound of its cost with its record
in one step of the store, as a run's model call does in its commit, and counts toward the
token's per-minute rate in the database, not in one process's memory. Before, a title call
was checked against the spend already stored and counted by its process alone: concurrent
title calls all passed a budget, and each process allowed the whole rate.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from cursor_byok.rpc_backend import TITLE_CONVERSATION
from cursor_byok.transport.cursor.titles import agent_title, short_title
from tests.e2e.test_crash_recovery import db_reader
from tests.e2e.test_shim import ShimRun, http, run_request
from tests.e2e.test_titles import CALL_COST, config_text, name
from tests.e2e.test_tokens import add_token
from tests.support.live import server_process
from tests.support.upstream import FakeUpstream

# A title call's bound here: its request's bytes / 3 at $0.01 a token, about $1.2 (its output
# is free); it costs $0.60.
BUDGET = 2.5  # two bounds fit, three do not


def title_calls(db: str, token_name: str) -> list[tuple[str, float | None]]:
    with db_reader(db) as conn:
        rows = conn.execute(
            "SELECT c.status, c.cost_usd FROM llm_calls c JOIN access_tokens t "
            "ON t.token_id = c.token_id WHERE c.conversation_id = ? AND t.name = ?",
            (TITLE_CONVERSATION, token_name),
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def two_servers(upstream: FakeUpstream, db: str, tmp_path: Path) -> tuple[str, Path]:
    text = config_text(upstream, db, auth_token=None).replace(  # type: ignore[arg-type]
        "[server]", '[server]\ntitle_model = "composer"\ntitle_timeout_s = 20', 1
    )
    config = tmp_path / "cursor-byok.toml"
    config.write_text(text)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return text, config


async def test_concurrent_title_calls_on_two_servers_keep_to_the_budget(
    upstream: FakeUpstream, tmp_path: Path, shared_database: str
) -> None:
    """Six slow title calls at once, three on each server, under a $2.50 budget: two bounds
    fit, so two are asked and four get the text rule (before: all six were asked, spending
    $3.60)."""
    text, config = two_servers(upstream, shared_database, tmp_path)
    secret = await asyncio.to_thread(add_token, config, "tess", "--budget-usd", str(BUDGET))
    with server_process(text, tmp_path / "a") as a, server_process(text, tmp_path / "b") as b:
        await asyncio.sleep(2.5)  # both servers see the token
        words = [f"[slow 1.5] Title {n}" for n in range(6)]
        named = await asyncio.gather(
            *(name((a, b)[n % 2], w, token=secret) for n, w in enumerate(words))
        )
        logs = a.log() + b.log()
    asked = [n for n, w in zip(named, words, strict=True) if n == short_title(f"You said: {w}")]
    ruled = [n for n, w in zip(named, words, strict=True) if n == agent_title(w)]
    calls = title_calls(shared_database, "tess")
    spent = sum(c or 0.0 for _, c in calls)
    print(f"\n{len(asked)} of 6 title calls asked; ${spent:.2f} of ${BUDGET}")
    assert len(asked) == 2 and len(ruled) == 4, (named, logs)
    assert [s for s, _ in calls] == ["committed", "committed"], calls
    assert spent <= BUDGET and spent == 2 * CALL_COST
    assert "has too little of its monthly budget left" in logs


async def test_the_title_calls_rate_is_counted_once_for_both_servers(
    upstream: FakeUpstream, tmp_path: Path, shared_database: str
) -> None:
    """A token of 3 model calls a minute: eight title calls alternating between the two
    servers ask the model three times (before: three per server, six), and the person's run
    right after is refused by the same rate: title calls and run calls share one count."""
    text, config = two_servers(upstream, shared_database, tmp_path)
    secret = await asyncio.to_thread(add_token, config, "rhea", "--rpm", "3")
    with server_process(text, tmp_path / "a") as a, server_process(text, tmp_path / "b") as b:
        await asyncio.sleep(2.5)
        named = [await name((a, b)[n % 2], f"Chat {n}", token=secret) for n in range(8)]
        async with http(b) as client:
            run = ShimRun(client, token=secret)
            async with run.subscribe() as reader:
                await run.append(run_request("a turn after the titles"))
                end = await reader.wait_end(20)
        logs = a.log() + b.log()
    asked = [n for n in range(8) if named[n] == short_title(f"You said: Chat {n}")]
    assert len(asked) == 3, (named, logs)
    assert len(title_calls(shared_database, "rhea")) == 3
    assert end.get("error", {}).get("code") == "resource_exhausted", end
    assert "rate limit of 3 model calls per minute" in end["error"]["message"], end


async def test_a_title_call_left_by_a_dead_server_is_finished_and_lets_its_bound_go(
    upstream: FakeUpstream, tmp_path: Path, shared_database: str
) -> None:
    """A slow title call holds its bound (about $1.2) of a $2.10 budget when its server is
    killed (kill -9). The other server finishes it by the lease rules, as any model call a dead
    process left in flight (before: it stayed "streaming", its bound held all month), and the
    person's next title call fits again beside what the dead one cost (two bounds would not)."""
    text, config = two_servers(upstream, shared_database, tmp_path)
    secret = await asyncio.to_thread(add_token, config, "ezra", "--budget-usd", "2.1")
    with server_process(text, tmp_path / "a") as a, server_process(text, tmp_path / "b") as b:
        await asyncio.sleep(2.5)
        asking = asyncio.ensure_future(name(a, "[slow 30] Left behind", token=secret))
        for _ in range(100):
            if title_calls(shared_database, "ezra"):
                break
            await asyncio.sleep(0.1)
        assert [s for s, _ in title_calls(shared_database, "ezra")] == ["planned"]
        a.kill9()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asking, 10)
        for _ in range(300):
            if [s for s, _ in title_calls(shared_database, "ezra")] == ["canceled"]:
                break
            await asyncio.sleep(0.1)
        calls = title_calls(shared_database, "ezra")
        named = await name(b, "Fix the login bug", token=secret)
        logs = a.log() + b.log()
    assert [s for s, _ in calls] == ["canceled"], (calls, logs)
    assert named == short_title("You said: Fix the login bug"), logs
