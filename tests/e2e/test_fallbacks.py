"""Fallback models through the real server process: two providers, each a loopback fake
upstream. `primary` (provider `down`) falls back to `backup` (provider `up`).

- `down` answers 503 on every attempt of a call: after its retries the same step goes to the
  backup, the IDE sees one normal turn, the call records show both calls;
- the turn's next call goes to the primary again (and a primary that answers keeps it);
- a primary that sent some text and then failed: the turn reports the error, no second model
  is called.
Both `Run` on HTTP/2 and the HTTP/1.1 shim."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_run_h2 import h2_run
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    chat_requests,
    exec_of,
    http,
    read_ok,
    run_request,
    unique,
)
from tests.support.brain import answer, is_tool_images
from tests.support.live import ServerProcess, ThreadedUpstream, server_process
from tests.support.upstream import FakeUpstream, Received, Reply

OVERLOADED = '{"error":{"message":"down: overloaded","type":"server_error"}}'


def _prompt_and_results(received: Received) -> tuple[str, int]:
    messages = json.loads(received.body)["messages"]
    users = [i for i, m in enumerate(messages) if m["role"] == "user" and not is_tool_images(m)]
    last = users[-1] if users else 0
    content = messages[last]["content"]
    text = content if isinstance(content, str) else json.dumps(content)
    return text, sum(1 for m in messages[last + 1 :] if m["role"] == "tool")


def chunk(text: str) -> bytes:
    body = {"id": "c1", "model": "brain-1", "choices": [{"index": 0, "delta": {"content": text}}]}
    return f"data: {json.dumps(body)}\n\n".encode()


def down_brain(received: Received) -> Reply:
    """`[down]`: 503 for every call; `[down-first]`: 503 until a tool result came back;
    `[partial]`: some text, then the stream ends without its end (a failure after output);
    anything else: the brain."""
    prompt, results = _prompt_and_results(received)
    if "[down]" in prompt or ("[down-first]" in prompt and not results):
        return Reply.json(503, OVERLOADED)
    if "[partial]" in prompt:
        return Reply(chunks=[chunk("Partial")])
    return answer(received)


def config(down: str, up: str, db: Path) -> str:
    return f"""
[server]
host = "127.0.0.1"
port = 8700
database = "{db}"

[providers.down]
api = "openai-chat"
base_url = "{down}/v1"

[providers.up]
api = "openai-chat"
base_url = "{up}/v1"

[models.primary]
provider = "down"
model = "brain-1"
fallbacks = ["backup"]

[models.backup]
provider = "up"
model = "brain-2"
"""


@pytest.fixture(scope="module")
def down() -> Iterator[FakeUpstream]:
    with ThreadedUpstream(down_brain) as up:
        yield up


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    with ThreadedUpstream(answer) as upstream:
        yield upstream


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fallbacks") / "byok.db"


@pytest.fixture(scope="module")
def server(down: FakeUpstream, up: FakeUpstream, db: Path) -> Iterator[ServerProcess]:
    with server_process(config(down.base_url, up.base_url, db), db.parent) as srv:
        yield srv


def calls(db: Path, conversation_id: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute(
            "SELECT call_id, provider, model, status, error, request_hash FROM llm_calls "
            "WHERE conversation_id = ? ORDER BY created_at_ms, call_id",
            (conversation_id,),
        ).fetchall()
    finally:
        conn.close()


def fallback_count(metrics: str) -> float:
    m = re.search(
        r'^cursor_byok_llm_fallbacks_total\{fallback="backup",model="primary"\} (\S+)$',
        metrics,
        re.M,
    )
    return float(m.group(1)) if m else 0.0


async def scrape(server: ServerProcess) -> str:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        return (await client.get("/metrics")).text


def sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


async def one_turn(
    server: ServerProcess, message: agent_pb2.AgentClientMessage, transport: str
) -> tuple[dict[str, Any], Reader]:
    """A turn without tool calls over `Run` on HTTP/2 or the HTTP/1.1 shim: its end and reader."""
    if transport == "h2":
        async with h2_run(server) as (stream, reader):
            await stream.send(message)
            return await reader.wait_end(60), reader
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(message)
            return await reader.wait_end(60), reader


@pytest.mark.parametrize("transport", ["shim", "h2"])
async def test_a_503_on_every_retry_falls_back_and_the_ide_sees_one_normal_turn(
    server: ServerProcess, down: FakeUpstream, up: FakeUpstream, db: Path, transport: str
) -> None:
    prompt = unique("[down] hello")
    before = fallback_count(await scrape(server))
    message = run_request(prompt, model="primary")
    cid = message.run_request.conversation_id
    end, reader = await one_turn(server, message, transport)
    assert end == {} and reader.turn_ended
    assert "".join(reader.texts) == f"You said: {prompt}"
    assert not any("error" in k for k in reader.kinds), reader.kinds
    # The primary's provider: the call and its 3 retries, the very same bytes each time.
    sent = [r.body for r in list(down.requests) if prompt.encode() in r.body]
    assert len(sent) == 4 and len(set(sent)) == 1
    # The backup: one new request, its own serialization (its own upstream model name), of the
    # same conversation.
    (primary_body,) = {json.dumps(json.loads(b), sort_keys=True) for b in sent}
    (fallback_body,) = chat_requests(up, prompt)
    assert json.loads(primary_body)["model"] == "brain-1" and fallback_body["model"] == "brain-2"
    assert fallback_body["messages"] == json.loads(primary_body)["messages"]
    assert fallback_body["tools"] == json.loads(primary_body)["tools"]
    # The records: the failed call on the primary, then the fallback that answered.
    rows = calls(db, cid)
    assert [r[:4] for r in rows] == [
        (f"{cid}:1:llm1", "down", "brain-1", "failed"),
        (f"{cid}:1:llm1:fb1", "up", "brain-2", "committed"),
    ]
    assert rows[0][4] is not None and "503" in rows[0][4] and rows[1][4] is None
    assert rows[0][5] == sha256(sent[0])
    assert rows[1][5] == sha256(
        next(r.body for r in list(up.requests) if prompt.encode() in r.body)
    )
    # One log line for the fallback, one count.
    lines = [ln for ln in server.log().splitlines() if f"call {cid}:1:llm1:fb1" in ln]
    assert len(lines) == 1, lines
    assert "model primary failed before its first output (" in lines[0]
    assert "falling back to backup" in lines[0]
    assert fallback_count(await scrape(server)) == before + 1
    # The dashboard marks the fallback call.
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        data = (await client.get(f"/dashboard/api/conversation?id={cid}")).json()
    marks = {r["call_id"]: r["fallback_of"] for r in data["llm_calls"]}
    assert marks == {f"{cid}:1:llm1": None, f"{cid}:1:llm1:fb1": f"{cid}:1:llm1"}


async def test_the_next_call_goes_to_the_first_model_again_over_h2(
    server: ServerProcess, down: FakeUpstream, up: FakeUpstream, db: Path
) -> None:
    """The first call of the turn falls back; the call after the tool result goes to the
    primary, which answers it."""
    prompt = unique('[down-first] [tool Read {"path": "/srv/app/notes.md"}]')
    message = run_request(prompt, model="primary")
    cid = message.run_request.conversation_id
    async with h2_run(server) as (stream, reader):
        await stream.send(message)
        ask = await reader.wait_for(exec_of("read_args"), timeout=60)
        esm = ask.exec_server_message
        assert esm.read_args.path == "/srv/app/notes.md"
        await stream.send(read_ok(esm.id, esm.read_args.path, "fallback notes\n"))
        end = await reader.wait_end(60)
    assert end == {} and reader.turn_ended
    assert "fallback notes" in "".join(reader.texts)
    assert [r[:4] for r in calls(db, cid)] == [
        (f"{cid}:1:llm1", "down", "brain-1", "failed"),
        (f"{cid}:1:llm1:fb1", "up", "brain-2", "committed"),
        (f"{cid}:1:llm2", "down", "brain-1", "committed"),
    ]
    primary = chat_requests(down, prompt)
    assert len(primary) == 5  # four attempts of call 1, then call 2 answered at once
    tool = [m for m in primary[-1]["messages"] if m["role"] == "tool"]
    assert tool and "fallback notes" in tool[0]["content"]
    assert len(chat_requests(up, prompt)) == 1


@pytest.mark.parametrize("transport", ["shim", "h2"])
async def test_no_fallback_after_output(
    server: ServerProcess, down: FakeUpstream, up: FakeUpstream, db: Path, transport: str
) -> None:
    prompt = unique("[partial] hello")
    before = fallback_count(await scrape(server))
    message = run_request(prompt, model="primary")
    cid = message.run_request.conversation_id
    end, reader = await one_turn(server, message, transport)
    assert end["error"]["code"] == "unavailable", end
    assert "".join(reader.texts) == "Partial"
    assert len(chat_requests(down, prompt)) == 1  # output came: not retried either
    assert chat_requests(up, prompt) == []
    assert [r[:4] for r in calls(db, cid)] == [(f"{cid}:1:llm1", "down", "brain-1", "failed")]
    assert fallback_count(await scrape(server)) == before


async def test_when_the_fallback_fails_too_the_turn_reports_its_error(
    server: ServerProcess, down: FakeUpstream, up: FakeUpstream, db: Path
) -> None:
    """The chain is spent: the backup's own failure (the brain's scripted 500, after its own
    retries) ends the turn, and `backup`'s fallbacks (none) are not followed."""
    prompt = unique("[down] [fail] hello")
    message = run_request(prompt, model="primary")
    cid = message.run_request.conversation_id
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(message)
            end = await reader.wait_end(60)
    assert end["error"]["code"] == "unavailable", end
    assert "brain: scripted failure" in end["error"]["message"]
    assert not reader.texts
    assert len(chat_requests(down, prompt)) == 4 and len(chat_requests(up, prompt)) == 4
    assert [r[:4] for r in calls(db, cid)] == [
        (f"{cid}:1:llm1", "down", "brain-1", "failed"),
        (f"{cid}:1:llm1:fb1", "up", "brain-2", "failed"),
    ]
