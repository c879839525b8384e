"""A model call resumed after a restart reserves its bound like every other call (issue 25's
leftover). Replica A streams a person's turn and dies (kill -9); replica B takes over A's
unfinished call, and the person's second turn runs on B, holding its bound. The first turn's
RunSSE is reopened on B: sending its call again would hold a second bound the budget cannot
take, so B refuses it (`resource_exhausted`) and sends nothing. Before, a resumed call was
checked against the spend stored alone, and went out. Two real server processes on one real
PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx

from tests.e2e import test_crash_recovery as crash
from tests.e2e.test_budget_holds import CALL_BOUND, config_text
from tests.e2e.test_shim import ShimRun, http, run_request, unique
from tests.e2e.test_tokens import add_token
from tests.support import connect_client as cc
from tests.support.live import server_process
from tests.support.postgres import Cluster
from tests.support.upstream import FakeUpstream

BUDGET = 1.5 * CALL_BOUND  # one call's bound fits beside what was spent, two do not


def statuses(db: str, conversation: str) -> list[str]:
    return [c[2] for c in crash.db_calls(db, conversation)]


async def until(cond: object, what: str, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)


async def test_a_resumed_call_reserves_its_bound_on_the_replica_that_resumes_it(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    upstream.requests.clear()
    db = pg_cluster.create_database(f"resume_{uuid.uuid4().hex[:8]}")
    text = config_text(upstream, db)
    config = tmp_path / "cursor-byok.toml"
    config.write_text(text)
    secret = await asyncio.to_thread(add_token, config, "uma", "--budget-usd", f"{BUDGET:.6f}")
    auth = cc.auth_headers(secret)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = f"conv-{uuid.uuid4().hex[:8]}", f"conv-{uuid.uuid4().hex[:8]}"
    prompt = unique("resumed: tell me something")
    upstream.push(crash.partial_then_hang("HALF-ANSWER " * 3))
    with server_process(text, tmp_path / "a") as a, server_process(text, tmp_path / "b") as b:
        await asyncio.sleep(2.5)  # both servers see the token
        async with httpx.AsyncClient(base_url=a.url, headers=auth, timeout=30) as on_a:
            run1 = crash.ShimRun(on_a, f"req-{uuid.uuid4()}", crash.ScriptedClient())
            try:
                await run1.open(crash.user_run_request(first, prompt))
                await run1.wait_for(lambda: len(run1.result.texts) >= 3, "text deltas")
                a.kill9()
                await run1.finish()
            finally:
                await run1.close()
        # B finishes the dead replica's call (its lease rules): its bound is no longer held.
        await until(lambda: statuses(db, first) == ["canceled"], "A's call taken over")
        async with http(b) as client:
            run2 = ShimRun(client, token=secret)
            async with run2.subscribe() as reader:
                await run2.append(run_request(f"[slow 6] {unique('second turn')}", second))
                await until(
                    lambda: statuses(db, second) in (["planned"], ["streaming"]), "2nd call"
                )
                async with httpx.AsyncClient(base_url=b.url, headers=auth, timeout=30) as on_b:
                    again = crash.ShimRun(on_b, run1.request_id, crash.ScriptedClient())
                    again.seqno = run1.seqno
                    try:
                        await again.open(None)
                        resumed = await again.finish()
                    finally:
                        await again.close()
                end2 = await reader.wait_end(30)
        logs = a.log() + b.log()
    assert end2 == {}, (end2, logs)
    end = resumed.end or {}
    assert end.get("error", {}).get("code") == "resource_exhausted", again.describe() + logs
    assert "too little of its monthly budget left" in end["error"]["message"], end
    sent = crash.requests_with(upstream, prompt)
    assert len(sent) == 1, f"the resumed call went out again: {len(sent)} requests"
    assert statuses(db, first) == ["failed"], statuses(db, first)  # finished with the refusal
