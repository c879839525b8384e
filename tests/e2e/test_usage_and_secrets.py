"""Usage, cost and secrets through the real server: turn_ended carries the run's totals, every
LLM call is stored with its tokens, timing and cost, and no key or token ever reaches the log or
the database — not even when the provider echoes the key in an error."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_shim import (
    ShimRun,
    exec_of,
    http,
    is_kind,
    read_ok,
    run_request,
    unique,
)
from tests.support.brain import answer
from tests.support.live import ServerProcess, server_process
from tests.support.upstream import FakeUpstream, Received, Reply

API_KEY = "sk-PLANTED-provider-key-9f8e7d6c"
TOKEN = "PLANTED-auth-token-1a2b3c4d"
PRICES = {"input": 2.0, "output": 8.0, "cache_read": 0.5, "cache_write": 2.5}


def leaky(received: Received) -> Reply:
    """The brain, except that `[echo-key]` makes the provider fail echoing the caller's key."""
    body = json.loads(received.body)
    if "[echo-key]" in json.dumps(body["messages"][-1]):
        key = received.headers.get("authorization", "")
        return Reply.json(401, json.dumps({"error": {"message": f"Incorrect API key: {key}"}}))
    return answer(received)


@pytest.fixture(scope="module")
def priced_server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    upstream.default = leaky
    work = tmp_path_factory.mktemp("priced")
    config = f"""
[server]
database = "{work / "byok.db"}"
auth_token = "{TOKEN}"

[providers.brain]
api = "openai-chat"
base_url = "{upstream.base_url}/v1"
api_key = "{API_KEY}"

[models."brain-1"]
provider = "brain"
model = "brain-1"

[models."brain-1".prices]
input = {PRICES["input"]}
output = {PRICES["output"]}
cache_read = {PRICES["cache_read"]}
cache_write = {PRICES["cache_write"]}
"""
    with server_process(config, work) as srv:
        yield srv
    upstream.default = answer


def db_rows(server: ServerProcess, sql: str) -> list[tuple[object, ...]]:
    path = server.log_path.parent / "byok.db"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def test_turn_totals_and_stored_calls(priced_server: ServerProcess) -> None:
    prompt = unique('[tool Read {"path": "usage.txt"}]')
    async with http(priced_server) as client:
        run = ShimRun(client, token=TOKEN)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            ask = await reader.wait_for(exec_of("read_args"))
            esm = ask.exec_server_message
            await run.append(read_ok(esm.id, esm.read_args.path, "forty-two\n"))
            end = await reader.wait_end()
    assert end == {}
    (ended,) = [m for m in reader.messages if is_kind("interaction_update.turn_ended")(m)]
    totals = ended.interaction_update.turn_ended
    # The brain reports (prompt 120, completion 30) for the tool call and (prompt 100 with 40
    # cached, completion len(text)//4) for the answer.
    answer_text = "".join(reader.texts)
    final_output = max(1, len("The tool said: " + "     1\tforty-two") // 4)
    assert totals.input_tokens == 120 + 60
    assert totals.cache_read_tokens == 40
    assert totals.output_tokens == 30 + final_output, answer_text
    rows = db_rows(
        priced_server,
        "SELECT status, input_tokens, output_tokens, cache_read_tokens, ttft_ms, duration_ms, "
        "cost_usd, provider, model FROM llm_calls ORDER BY created_at_ms",
    )
    assert [r[0] for r in rows][-2:] == ["committed", "committed"]
    first, second = rows[-2:]
    assert first[1:4] == (120, 30, 0) and second[1:4] == (60, final_output, 40)
    for row in (first, second):
        assert isinstance(row[4], int) and row[4] >= 0  # ttft_ms
        assert isinstance(row[5], int) and row[5] >= row[4]  # duration_ms
        assert row[7:] == ("brain", "brain-1")
    expected = (120 * PRICES["input"] + 30 * PRICES["output"]) / 1e6
    assert first[6] == pytest.approx(expected)


async def test_no_secret_in_the_log_or_the_database(priced_server: ServerProcess) -> None:
    async with http(priced_server) as client:
        run = ShimRun(client, token=TOKEN)
        async with run.subscribe() as reader:
            await run.append(run_request(unique("[echo-key] please fail")))
            end = await reader.wait_end()
    assert end["error"]["code"] == "unavailable"
    assert "Incorrect API key" in end["error"]["message"]
    assert API_KEY not in json.dumps(end)
    db_dir = priced_server.log_path.parent
    files = [priced_server.log_path, *db_dir.glob("byok.db*")]
    assert any(p.name == "byok.db" for p in files)
    for path in files:
        data = Path(path).read_bytes()
        assert API_KEY.encode() not in data, path
        assert TOKEN.encode() not in data, path


async def test_metrics_and_dashboard_reflect_the_runs(priced_server: ServerProcess) -> None:
    async with http(priced_server) as client:
        run = ShimRun(client, token=TOKEN)
        async with run.subscribe() as reader:
            await run.append(run_request(unique("metrics please")))
            assert await reader.wait_end() == {}
        assert (await client.get("/metrics")).status_code == 401
        auth = {"authorization": f"Bearer {TOKEN}"}
        metrics = (await client.get("/metrics", headers=auth)).text
        summary = (await client.get("/dashboard/api/summary", headers=auth)).json()
        page = await client.get("/dashboard")
        root = await client.get("/")  # a person opening the address in a browser, no token
    assert root.status_code == 200 and "/dashboard" in root.text
    ok_calls = [
        line
        for line in metrics.splitlines()
        if line.startswith("cursor_byok_llm_calls_total{") and 'outcome="ok"' in line
    ]
    assert ok_calls and float(ok_calls[0].rsplit(" ", 1)[1]) >= 1
    assert (
        'cursor_byok_llm_tokens_total{kind="input",model="brain-1",provider="brain"}' in (metrics)
        or "cursor_byok_llm_tokens_total{" in metrics
    )
    assert "cursor_byok_rpc_requests_total" in metrics and "cursor_byok_active_runs" in metrics
    assert any(c.get("model") == "brain-1" for c in summary["llm_calls"])
    assert page.status_code == 200 and b"<html" in page.content.lower()
    assert API_KEY not in metrics and TOKEN not in json.dumps(summary)
