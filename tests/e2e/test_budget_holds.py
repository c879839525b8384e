"""Budgets and rates that hold under concurrency, through two real server processes on one
database (a SQLite file and a PostgreSQL database: each test runs on both).

Forty turns of one person at once, half on each server, against a small budget: each model
call reserves an upper bound of its cost in the commit that plans it (its output cap at the
output price; the input is free here) and settles to its real cost when it ends, so the
person's spend stays within the budget however the turns interleave. Before reservations
every one of the forty was admitted (the issue measured $0.363 spent of a $0.02 budget).
The per-minute rate is counted in the same step from the database, so it holds across the
two servers too (before: per process, so up to twice the rate)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from cursor_byok.store import open_store
from cursor_byok.transport.runtime.reservations import month_window
from tests.e2e.test_shim import ShimRun, http, run_request
from tests.e2e.test_tokens import add_token
from tests.support.live import ServerProcess, server_process
from tests.support.upstream import FakeUpstream

OPERATOR = "PLANTED-operator-token-budget"
# "You said: [slow 0.3] turn 07" is 28 characters: 7 completion tokens, $0.0035 at $500 per
# million output tokens. The cap, 12 tokens, bounds a call at $0.006.
OUTPUT_PRICE = 500.0
OUTPUT_CAP = 12
CALL_BOUND = OUTPUT_CAP * OUTPUT_PRICE / 1_000_000
BUDGET = 0.02
TURNS = 40


def config_text(upstream: FakeUpstream, db: str) -> str:
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
max_output_tokens = {OUTPUT_CAP}

[models."brain-1".prices]
output = {OUTPUT_PRICE}
"""


async def turn(server: ServerProcess, token: str, n: int) -> dict[str, Any]:
    async with http(server) as client:
        run = ShimRun(client, token=token)
        async with run.subscribe() as reader:
            await run.append(run_request(f"[slow 0.3] turn {n:02d}"))
            return await reader.wait_end(60)


async def forty_at_once(
    upstream: FakeUpstream, tmp_path: Path, db: str, *limits: str
) -> tuple[list[dict[str, Any]], float, int]:
    """Forty turns of one token at once, alternating between two servers on `db`: their
    ends, the token's spend this month and its model calls, from the database."""
    text = config_text(upstream, db)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    config = tmp_path / "cursor-byok.toml"
    config.write_text(text)
    secret = await asyncio.to_thread(add_token, config, "ola", *limits)
    with server_process(text, tmp_path / "a") as a, server_process(text, tmp_path / "b") as b:
        servers = (a, b)
        ends = await asyncio.gather(*(turn(servers[n % 2], secret, n) for n in range(TURNS)))
    store = await open_store(db)
    try:
        (usage,) = await store.token_usage(*month_window(int(time.time() * 1000))[:2])
        calls = await store.list_recent_llm_calls(200)
    finally:
        await store.close()
    assert all(c.status in ("committed", "failed", "canceled") for c in calls)  # all settled
    return list(ends), usage.cost_usd, usage.llm_calls


async def test_forty_turns_at_once_never_overspend_the_budget(
    upstream: FakeUpstream, tmp_path: Path, shared_database: str
) -> None:
    ends, spent, calls = await forty_at_once(
        upstream, tmp_path, shared_database, "--budget-usd", str(BUDGET)
    )
    ok = [e for e in ends if e == {}]
    refused = [e for e in ends if e.get("error", {}).get("code") == "resource_exhausted"]
    assert len(ok) + len(refused) == TURNS, [e for e in ends if e not in ok + refused]
    assert len(ok) == calls >= 3  # the budget was used, not refused wholesale
    ratio = spent / BUDGET
    print(f"\n{len(ok)} of {TURNS} turns admitted: ${spent:.4f} of ${BUDGET} ({ratio:.2f}x)")
    assert spent <= BUDGET + 1e-9  # within the budget (the guarantee: within one call's bound)
    assert spent > BUDGET - 2 * CALL_BOUND  # and most of it usable
    for end in refused:
        assert "monthly budget" in end["error"]["message"], end


async def test_the_rate_holds_across_two_servers(
    upstream: FakeUpstream, tmp_path: Path, shared_database: str
) -> None:
    ends, _, calls = await forty_at_once(upstream, tmp_path, shared_database, "--rpm", "5")
    ok = [e for e in ends if e == {}]
    assert len(ok) == calls == 5, ends  # five of the forty in the minute, on both servers
    for end in ends:
        if end != {}:
            assert end["error"]["code"] == "resource_exhausted", end
            assert "rate limit of 5 model calls per minute" in end["error"]["message"], end
