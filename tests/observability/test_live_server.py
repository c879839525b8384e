"""/metrics and the dashboard's JSON of the REAL server process after real runs over loopback
HTTP (issue 13, points 15, 17 and 18): an HTTP/2 `Run`, a `Run` asking for a model the server
does not serve, and a `RunSSE` fed by `BidiAppend`s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cursor_byok.transport.cursor.rpc import agent_title
from tests.e2e.test_run_h2 import h2_run
from tests.e2e.test_shim import ShimRun, http, run_request
from tests.support.live import ServerProcess, ThreadedUpstream, brain_config, server_process

PROMPT = "Refactor the parser module please, and keep the tests green"
SERVICE = "agent.v1.AgentService"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with (
        ThreadedUpstream() as upstream,
        server_process(brain_config(upstream.base_url, db=tmp_path / "db.sqlite"), tmp_path) as srv,
    ):
        yield srv


def rpc_counts(text: str) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "cursor_byok_rpc_requests_total":
                out[(s.labels["rpc"], s.labels["outcome"])] = s.value
    return out


async def poll(client: httpx.AsyncClient, path: str, ready: Any, timeout: float = 10.0) -> Any:
    """GET `path` (JSON) until `ready(body)` holds: run outcomes are stored after the run's end
    has gone out, in the background."""
    deadline = time.monotonic() + timeout
    while True:
        body = (await client.get(path)).json()
        if ready(body) or time.monotonic() > deadline:
            return body
        await asyncio.sleep(0.05)


async def test_every_rpc_is_counted_and_a_failed_run_shows_on_the_dashboard(
    server: ServerProcess,
) -> None:
    async with h2_run(server) as (stream, reader):
        await stream.send(run_request(PROMPT, "conv-ok-1"))
        assert await reader.wait_end() == {}
    async with h2_run(server) as (stream, reader):
        await stream.send(run_request("hello", "conv-refused-1", model="gpt-9"))
        end = await reader.wait_end()
    assert end["error"]["code"] == "invalid_argument"
    async with http(server) as client:
        shim = ShimRun(client)
        async with shim.subscribe() as sse:
            await shim.append(run_request("over the shim", "conv-shim-1"))
            assert await sse.wait_end() == {}
        appends = shim.seq

        summary = await poll(client, "/dashboard/api/summary", lambda b: b["totals"]["runs"] >= 3)
        metrics = (await client.get("/metrics")).text
        conversation = (await client.get("/dashboard/api/conversation?id=conv-ok-1")).json()

    # Point 18: Run, RunSSE and BidiAppend are counted, each with its outcome.
    counts = rpc_counts(metrics)
    assert counts[(f"{SERVICE}/Run", "ok")] == 1
    assert counts[(f"{SERVICE}/Run", "invalid_argument")] == 1
    assert counts[(f"{SERVICE}/RunSSE", "ok")] == 1
    assert appends >= 1 and counts[("aiserver.v1.BidiService/BidiAppend", "ok")] == appends
    assert "cursor_byok_llm_cache_hit_ratio" not in metrics

    # Point 15: the refused run is an error with its message, as in the log.
    totals = summary["totals"]
    assert (totals["runs"], totals["failed_runs"], totals["calls"]) == (3, 1, 2)
    (failed,) = [r for r in summary["runs"] if r["failed"]]
    assert failed["conversation_id"] == "conv-refused-1" and failed["model"] == "gpt-9"
    assert failed["error"].startswith("unknown model 'gpt-9'; this server offers:")
    assert "outcome=failed" in server.log() and "conv-refused-1" in server.log()

    # Point 17: the conversation has the title the client shows, and its calls.
    c = conversation["conversation"]
    assert c["title"] == agent_title(PROMPT) == "Refactor the parser module please, and"
    assert (c["model"], c["turns"], c["llm_calls"], c["runs"]) == ("brain-1", 1, 1, 1)
    assert c["tokens"] > 0 and c["last_error"] is None
    assert [call["conversation_id"] for call in conversation["llm_calls"]] == ["conv-ok-1"]
