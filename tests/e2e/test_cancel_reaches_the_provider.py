"""Every way a turn is stopped ends its model call at the provider, through the real server
process: a cancel action, an HTTP/2 `Run` closed by its client, a newer run (supersede), a
shutdown (SIGTERM), and a `RunSSE` not reopened within the shim's reconnect grace (one
reopened within it keeps its call). The provider is a slow streaming server on loopback
(tests/support/streaming_upstream.py) that notes each chunk it wrote and when it saw its
connection close: each cause must close it within CLOSE_BOUND_S, with at most the chunk already
on its way sent after it. The call's record says why it ended and what it cost so far (the
request's estimated input, the output counted from what streamed, both flagged as estimates),
and the run's log line, the token's spend and /metrics include it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sqlite3
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cursor_byok.store.api import LLMCallRecord
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime.access import month_window
from cursor_byok.transport.runtime.leases import RENEW_S
from tests.e2e.test_shim import Reader, ShimRun, cancel, is_text, run_request
from tests.e2e.test_tokens import add_token
from tests.support import connect_client as cc
from tests.support import postgres
from tests.support.live import ServerProcess, server_process
from tests.support.streaming_upstream import Exchange, StreamingUpstream, openai_chat_events
from tests.support.streaming_upstream import threaded as threaded_upstream
from tests.support.upstream import Received

CLOSE_BOUND_S = 0.1  # from the cause to the provider seeing its connection close
GRACE_S = 1.5  # the shim's reconnect grace of these servers (server.reconnect_grace_s)
REAP_S = 1.0  # how often the transport looks for runs without a client (TransportLimits)
INTERVAL_S = 0.02  # one token every 20 ms: a long answer takes a while
LONG = 3000  # tokens of an answer nobody waits for to end
PROMPT_TOKENS = 900  # what the provider reports in its final usage chunk
OPERATOR = "PLANTED-operator-cancel-23"
PRICE_IN, PRICE_OUT = 3.0, 15.0  # USD per million tokens
MODEL = "slow-1"


class Script:
    """What the slow provider answers each request: the next length pushed, else LONG."""

    def __init__(self) -> None:
        self.lengths: deque[int] = deque()

    def __call__(self, received: Received) -> list[bytes]:
        n = self.lengths.popleft() if self.lengths else LONG
        return openai_chat_events(n, prompt_tokens=PROMPT_TOKENS, model=MODEL)


@dataclass
class Provider:
    up: StreamingUpstream
    script: Script

    def exchange_with(self, marker: str) -> Exchange:
        found = [e for e in self.up.exchanges if marker.encode() in e.request.body]
        assert len(found) == 1, (marker, len(found))
        return found[0]

    async def exchange(self, marker: str, timeout: float = 10.0) -> Exchange:
        assert await self.up.until(
            lambda: any(marker.encode() in e.request.body for e in self.up.exchanges), timeout
        ), f"the provider never got {marker!r}"
        return self.exchange_with(marker)


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    script = Script()
    with threaded_upstream(script, interval_s=INTERVAL_S) as up:
        yield Provider(up, script)


def config_text(provider: Provider, db: Path | str) -> str:
    return f"""
[server]
database = "{db}"
auth_token = "{OPERATOR}"
reconnect_grace_s = {GRACE_S}

[providers.slow]
api = "openai-chat"
base_url = "{provider.up.base_url}/v1"

[models."{MODEL}"]
provider = "slow"
model = "{MODEL}"
context_window = 128000

[models."{MODEL}".prices]
input = {PRICE_IN}
output = {PRICE_OUT}
"""


@dataclass
class Served:
    server: ServerProcess
    db: Path
    token: str  # a person token: the calls count toward its spend
    work: Path


def prepare(provider: Provider, work: Path) -> tuple[str, str]:
    """The configuration of a server in `work` and the secret of its person token (made by
    the real `cursor-byok token add`; call it from a thread in a coroutine)."""
    text = config_text(provider, work / "byok.db")
    config = work / "cursor-byok.toml"
    config.write_text(text)
    return text, add_token(config, "tess", "--budget-usd", "100")


@contextlib.contextmanager
def start_server(work: Path, text: str, token: str) -> Iterator[Served]:
    with server_process(text, work) as server:
        yield Served(server, work / "byok.db", token, work)


@pytest.fixture(scope="module")
def served(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("cancel23")
    with start_server(work, *prepare(provider, work)) as done:
        yield done


@contextlib.asynccontextmanager
async def h2_run(served: Served) -> AsyncIterator[tuple[cc.H2Stream, Reader]]:
    client = await cc.H2Client.connect("127.0.0.1", served.server.port)
    try:
        stream = await client.open_run(token=served.token)
        reader = Reader(stream, stream.send)
        try:
            yield stream, reader
        finally:
            await reader.close()
    finally:
        await client.close()


async def call_of(db: Path, conversation_id: str, *, wait_final: bool = True) -> LLMCallRecord:
    """The conversation's one model call as stored (waiting for it to leave "planned")."""
    deadline = time.monotonic() + 10
    while True:
        store = await SQLiteStore.open(db)
        try:
            calls = await store.list_conversation_llm_calls(conversation_id)
        finally:
            await store.close()
        if calls and (not wait_final or calls[0].status != "planned"):
            (call,) = calls
            return call
        if time.monotonic() > deadline:
            raise AssertionError(f"no final call record for {conversation_id}: {calls}")
        await asyncio.sleep(0.05)


def run_line(log: str, request_id: str) -> dict[str, str]:
    """The run's log line (observability/logs.py) as key=value pairs."""
    for line in log.splitlines():
        if f"request_id={request_id}" in line and "outcome=" in line:
            return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
    raise AssertionError(f"no run line for {request_id} in:\n{log[-3000:]}")


def content_chunks(exchange: Exchange, until: float | None = None) -> int:
    """Content deltas the provider wrote (before `until`): every chunk after the role chunk."""
    sent = [at for at, _ in exchange.sent if until is None or at <= until]
    return max(0, len(sent) - 1)


def assert_closed_at_once(exchange: Exchange, cause_at: float) -> float:
    assert exchange.closed_at is not None, "the provider's connection was never closed"
    took = exchange.closed_at - cause_at
    assert took < CLOSE_BOUND_S, f"the provider saw its connection close {took * 1000:.0f} ms late"
    late, _ = exchange.sent_after(cause_at)
    assert late <= 1, f"{late} chunks went out after the cause"
    assert not exchange.completed
    return took


def assert_stopped_record(call: LLMCallRecord, reason: str, exchange: Exchange) -> None:
    """Canceled with `reason`; its input the request's estimate, its output what streamed,
    both flagged; priced."""
    assert call.status == "canceled", call
    assert call.error == reason
    assert call.estimated_tokens == "input,output"
    assert call.input_tokens is not None and 200 < call.input_tokens < PROMPT_TOKENS * 10
    streamed = content_chunks(exchange)
    assert call.output_tokens is not None
    assert streamed - 1 <= call.output_tokens <= streamed, (call.output_tokens, streamed)
    expected = (call.input_tokens * PRICE_IN + call.output_tokens * PRICE_OUT) / 1e6
    assert call.cost_usd == pytest.approx(expected)
    assert call.finished_at_ms is not None


async def test_a_cancel_action_closes_the_provider_stream_at_once(
    served: Served, provider: Provider
) -> None:
    prompt = f"cancel action {uuid.uuid4().hex[:8]}"
    conversation = str(uuid.uuid4())
    async with httpx.AsyncClient(base_url=served.server.url, timeout=30) as client:
        run = ShimRun(client, token=served.token)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, conversation, model=MODEL))
            exchange = await provider.exchange(prompt)
            await reader.wait_for(lambda m: is_text(m) and len(reader.texts) >= 5)
            cause = time.monotonic()
            await run.append(cancel("user pressed stop"))
            assert await provider.up.until(lambda: exchange.closed_at is not None, 5)
            end = await reader.wait_end(5)
    assert end["error"]["code"] == "canceled", end
    assert_closed_at_once(exchange, cause)
    call = await call_of(served.db, conversation)
    assert_stopped_record(call, "canceled by the client (user pressed stop)", exchange)
    line = run_line(served.server.log(), run.request_id)
    assert line["outcome"] == "canceled" and line["llm_calls"] == "1", line
    assert int(line["output_tokens"]) == call.output_tokens
    assert int(line["input_tokens"]) == call.input_tokens
    assert "shutting down" not in served.server.log()

    # The token's spend and /metrics count the canceled call.
    store = await SQLiteStore.open(served.db)
    try:
        start, end_ms, _ = month_window(int(time.time() * 1000))
        spent = await store.token_spend(call.token_id or "", start, end_ms)
    finally:
        await store.close()
    assert call.token_id is not None and spent >= call.cost_usd  # type: ignore[operator]
    async with httpx.AsyncClient(base_url=served.server.url, timeout=30) as client:
        metrics = (
            await client.get("/metrics", headers={"authorization": f"Bearer {OPERATOR}"})
        ).text
    assert re.search(
        rf'cursor_byok_llm_calls_total\{{model="{MODEL}",outcome="canceled",provider="slow"\}} '
        r"[1-9]",
        metrics,
    ), metrics
    output = re.search(
        rf'cursor_byok_llm_tokens_total\{{kind="output",model="{MODEL}",provider="slow"\}} (\S+)',
        metrics,
    )
    assert output is not None and float(output.group(1)) >= call.output_tokens  # type: ignore[operator]
    assert re.search(
        r'cursor_byok_token_llm_calls_total\{outcome="canceled",token="tess"\} 1', metrics
    )


async def test_a_closed_http2_stream_closes_the_provider_stream_at_once(
    served: Served, provider: Provider
) -> None:
    prompt = f"closed h2 stream {uuid.uuid4().hex[:8]}"
    conversation = str(uuid.uuid4())
    async with h2_run(served) as (stream, reader):
        await stream.send(run_request(prompt, conversation, model=MODEL))
        exchange = await provider.exchange(prompt)
        await reader.wait_for(lambda m: is_text(m) and len(reader.texts) >= 5)
        cause = time.monotonic()
        await stream.conn.reset(stream.stream_id)  # the client aborts its request (Ctrl-C)
        assert await provider.up.until(lambda: exchange.closed_at is not None, 5)
    assert_closed_at_once(exchange, cause)
    call = await call_of(served.db, conversation)
    assert_stopped_record(call, "canceled by the client: its stream closed", exchange)


async def test_a_newer_run_closes_the_older_runs_provider_stream_at_once(
    served: Served, provider: Provider
) -> None:
    conversation = str(uuid.uuid4())
    first, second = (f"supersede {n} {uuid.uuid4().hex[:8]}" for n in (1, 2))
    provider.script.lengths.extend([LONG, 3])
    async with httpx.AsyncClient(base_url=served.server.url, timeout=30) as client:
        old, new = ShimRun(client, token=served.token), ShimRun(client, token=served.token)
        async with old.subscribe() as old_reader:
            await old.append(run_request(first, conversation, model=MODEL))
            exchange = await provider.exchange(first)
            await old_reader.wait_for(lambda m: is_text(m) and len(old_reader.texts) >= 5)
            async with new.subscribe() as new_reader:
                cause = time.monotonic()
                await new.append(run_request(second, conversation, model=MODEL))
                assert await provider.up.until(lambda: exchange.closed_at is not None, 5)
                assert (await new_reader.wait_end(20)) == {}
            old_end = await old_reader.wait_end(5)
    assert old_end["error"]["code"] == "canceled"
    assert_closed_at_once(exchange, cause)
    store = await SQLiteStore.open(served.db)
    try:
        calls = await store.list_conversation_llm_calls(conversation)
    finally:
        await store.close()
    (older,) = [c for c in calls if c.call_id.endswith(":1:llm1")]
    assert_stopped_record(older, "superseded by a newer request", exchange)
    assert {c.status for c in calls} == {"canceled", "committed"}


async def test_a_runsse_reopened_within_its_grace_keeps_its_call(
    served: Served, provider: Provider
) -> None:
    prompt = f"reconnect {uuid.uuid4().hex[:8]}"
    conversation = str(uuid.uuid4())
    tokens = int((GRACE_S + REAP_S + 1.0) / INTERVAL_S)  # outlasts the grace
    provider.script.lengths.append(tokens)
    async with httpx.AsyncClient(base_url=served.server.url, timeout=30) as client:
        run = ShimRun(client, token=served.token)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, conversation, model=MODEL))
            exchange = await provider.exchange(prompt)
            await reader.wait_for(is_text)
        await asyncio.sleep(GRACE_S / 2)  # the client is away, its call goes on
        async with run.subscribe() as reader:
            end = await reader.wait_end(tokens * INTERVAL_S + 10)
    assert end == {} and reader.turn_ended
    # Everything went out: the role chunk, the deltas, the finish, the usage and [DONE].
    assert exchange.completed and exchange.chunks == 1 + tokens + 3
    call = await call_of(served.db, conversation)
    assert call.status == "committed" and call.estimated_tokens is None
    assert (call.input_tokens, call.output_tokens) == (PROMPT_TOKENS, tokens)


async def test_a_runsse_not_reopened_within_its_grace_ends_its_call_when_it_passes(
    served: Served, provider: Provider
) -> None:
    prompt = f"gone shim {uuid.uuid4().hex[:8]}"
    conversation = str(uuid.uuid4())
    async with httpx.AsyncClient(base_url=served.server.url, timeout=30) as client:
        run = ShimRun(client, token=served.token)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, conversation, model=MODEL))
            exchange = await provider.exchange(prompt)
            await reader.wait_for(is_text)
        dropped = time.monotonic()
        assert await provider.up.until(lambda: exchange.closed_at is not None, GRACE_S + 5)
    assert exchange.closed_at is not None
    waited = exchange.closed_at - dropped
    # Kept through the grace, ended at the reaper's first look after it.
    assert GRACE_S <= waited < GRACE_S + REAP_S + CLOSE_BOUND_S + 0.2, waited
    call = await call_of(served.db, conversation)
    assert_stopped_record(
        call, f"canceled: the client did not reconnect within {GRACE_S:g} s", exchange
    )
    line = run_line(served.server.log(), run.request_id)
    assert line["outcome"] == "canceled"
    assert "reconnect" in line["error"], line


async def test_a_shutdown_closes_the_provider_stream_and_records_the_call(
    provider: Provider, tmp_path: Path
) -> None:
    """SIGTERM mid-answer: the call ends at the provider at once, its record says `shutdown`
    (nothing stays planned), the turn is kept; the restarted server resumes it, sending the
    same request again, and the record adds both attempts' tokens."""
    prompt = f"shutdown {uuid.uuid4().hex[:8]}"
    conversation = str(uuid.uuid4())
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    text, token = await asyncio.to_thread(prepare, provider, tmp_path / "one")
    with start_server(tmp_path / "one", text, token) as first:
        async with httpx.AsyncClient(base_url=first.server.url, timeout=30) as client:
            run = ShimRun(client, token=first.token)
            async with run.subscribe() as reader:
                await run.append(run_request(prompt, conversation, model=MODEL))
                exchange = await provider.exchange(prompt)
                await reader.wait_for(lambda m: is_text(m) and len(reader.texts) >= 5)
                cause = time.monotonic()
                first.server.proc.send_signal(signal.SIGTERM)
                assert await provider.up.until(lambda: exchange.closed_at is not None, 5)
                end = await reader.wait_end(10)
        assert await asyncio.to_thread(first.server.proc.wait, 20) == 0
        log = first.server.log()
    assert end["error"]["code"] == "unavailable", end  # the client may come back
    assert_closed_at_once(exchange, cause)
    call = await call_of(first.db, conversation)
    assert_stopped_record(call, "shutdown: the server stopped during the call", exchange)
    line = run_line(log, run.request_id)
    assert line["outcome"] == "canceled" and "shutdown" in line["error"], line
    # The lease ended with the process; the turn still waits on its call.
    conn = sqlite3.connect(first.db)
    try:
        ended = conn.execute("SELECT ended_at_ms FROM process_leases").fetchall()
        state = json.loads(
            conn.execute(
                "SELECT state FROM conversations WHERE conversation_id = ?", (conversation,)
            ).fetchone()[0]
        )
        planned = conn.execute("SELECT count(*) FROM llm_calls WHERE status = 'planned'")
        assert planned.fetchone()[0] == 0
    finally:
        conn.close()
    assert [r[0] is not None for r in ended] == [True]
    assert state["status"] == "WaitingLLM"

    # The restarted server: the client reopens its RunSSE and the same call goes out again.
    provider.script.lengths.append(3)
    with server_process(config_text(provider, first.db), tmp_path / "two") as again:
        async with httpx.AsyncClient(base_url=again.url, timeout=30) as client:
            run.client = client
            async with run.subscribe() as reader:
                resumed = await reader.wait_end(20)
    assert resumed == {} and reader.turn_ended
    sent = [e for e in provider.up.exchanges if prompt.encode() in e.request.body]
    assert len(sent) == 2 and sent[1].request.body == sent[0].request.body
    final = await call_of(first.db, conversation)
    assert final.status == "committed"
    assert final.input_tokens == call.input_tokens + PROMPT_TOKENS  # type: ignore[operator]
    assert final.output_tokens == call.output_tokens + 3  # type: ignore[operator]
    assert final.estimated_tokens == "input,output"  # the first attempt's counts are ours
    assert final.cost_usd == pytest.approx(
        call.cost_usd + (PROMPT_TOKENS * PRICE_IN + 3 * PRICE_OUT) / 1e6  # type: ignore[operator]
    )


def stored_call(db: Path | str, conversation_id: str) -> tuple[str, str | None, str | None, int]:
    """The conversation's one call as any process sees it (status, error, owner's pid)."""
    with postgres.reader(db) as conn:
        rows = conn.execute(
            "SELECT c.status, c.error, l.pid, c.output_tokens FROM llm_calls c "
            "LEFT JOIN process_leases l ON l.process_id = c.process_id "
            "WHERE c.conversation_id = ?",
            (conversation_id,),
        ).fetchall()
    (row,) = rows
    return row[0], row[1], row[2], row[3]


async def test_a_starting_process_finishes_a_dead_ones_calls_never_a_live_ones(
    provider: Provider, tmp_path: Path, shared_database: str
) -> None:
    """Three processes on one database (a SQLite file, a PostgreSQL database): a live one
    streaming a call, one killed (-9) mid-call, and one that starts then. Once it serves,
    the dead process's call is finished (canceled, saying why) and the live one's is still
    its own, streaming; the live one then ends it itself."""
    db = shared_database
    for name in ("live", "doomed", "starting"):
        (tmp_path / name).mkdir()
    text = config_text(provider, db)
    alive, dead = f"live call {uuid.uuid4().hex[:8]}", f"dead call {uuid.uuid4().hex[:8]}"
    conv_alive, conv_dead = str(uuid.uuid4()), str(uuid.uuid4())
    with (
        server_process(text, tmp_path / "live") as live,
        server_process(text, tmp_path / "doomed") as doomed,
    ):
        async with (
            httpx.AsyncClient(base_url=live.url, timeout=30) as to_live,
            httpx.AsyncClient(base_url=doomed.url, timeout=30) as to_doomed,
        ):
            live_run = ShimRun(to_live, token=OPERATOR)
            doomed_run = ShimRun(to_doomed, token=OPERATOR)
            async with live_run.subscribe() as live_reader, doomed_run.subscribe() as dead_reader:
                await live_run.append(run_request(alive, conv_alive, model=MODEL))
                await doomed_run.append(run_request(dead, conv_dead, model=MODEL))
                await live_reader.wait_for(is_text)
                await dead_reader.wait_for(is_text)
                assert stored_call(db, conv_dead)[:3] == ("planned", None, doomed.proc.pid)
                doomed.kill9()
                with server_process(text, tmp_path / "starting"):
                    # Serving: its start has run (or the live process's renewal did it first).
                    status, error, _, _ = stored_call(db, conv_dead)
                    assert status == "canceled", (status, error)
                    assert error == (
                        "the server process that made the call stopped before it ended "
                        f"(its process (pid {doomed.proc.pid}) is gone)"
                    )
                    # The live process's call is untouched: still planned, its own, streaming.
                    assert stored_call(db, conv_alive)[:3] == ("planned", None, live.proc.pid)
                    streaming = provider.exchange_with(alive)
                    assert streaming.closed_at is None and not streaming.completed
                    await asyncio.sleep(RENEW_S + 1)  # past a renewal of every lease
                    assert stored_call(db, conv_alive)[:3] == ("planned", None, live.proc.pid)
                    await live_run.append(cancel())
                    await live_reader.wait_end(5)
    status, error, pid, output = stored_call(db, conv_alive)
    assert (status, error, pid) == (
        "canceled",
        "canceled by the client (user pressed stop)",
        live.proc.pid,
    )
    assert output is not None and output > 0
