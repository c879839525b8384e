"""Tokens per person through the real server process, over real HTTP: tokens made by the real
`cursor-byok token` command, runs on the HTTP/1.1 shim and on HTTP/2, limits enforced before
each model call, the operator's own `auth_token` beside them, and no token value anywhere in
the log, /metrics or the database file."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cursor_byok.cli import main
from cursor_byok.store.api import LLMCallRecord
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.cursor.proto import aiserver_pb2
from cursor_byok.transport.runtime.access import month_window
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
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, server_process
from tests.support.upstream import FakeUpstream

OPERATOR = "PLANTED-operator-token-77aa"
# Output is priced, input free: the brain's answer "You said: alice turn 1" is 5 completion
# tokens (its characters / 4), $0.50; each call reserves its output cap, 12 tokens ($1.20), of a
# budget until it finishes (transport/runtime/reservations.py).
OUTPUT_PRICE = 100_000.0
OUTPUT_CAP = 12
CALL_COST = 0.50
CALL_BOUND = 1.20


def config_text(upstream: FakeUpstream, db: Path | str, *, auth_token: str | None) -> str:
    auth = f'auth_token = "{auth_token}"' if auth_token else ""
    return f"""
[server]
database = "{db}"
{auth}

[providers.brain]
api = "openai-chat"
base_url = "{upstream.base_url}/v1"

[models."brain-1"]
provider = "brain"
model = "brain-1"
max_output_tokens = {OUTPUT_CAP}

[models."brain-1".prices]
output = {OUTPUT_PRICE}

[models."composer-test"]
provider = "brain"
model = "brain-1"
aliases = ["composer"]
max_output_tokens = {OUTPUT_CAP}

[models."composer-test".prices]
output = {OUTPUT_PRICE}
"""


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def token_cli(config: Path, *args: str) -> Done:
    """`cursor-byok token ...`: the command's own code, in this process (a child process would
    cost its start-up per call; the revocation test runs it as one)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["token", *args, "--config", str(config)])
    return Done(code, out.getvalue(), err.getvalue())


def token_process(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "cursor_byok", "token", *args, "--config", str(config)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def add_token(config: Path, name: str, *limits: str) -> str:
    done = token_cli(config, "add", name, *limits)
    assert done.returncode == 0, done.stderr
    secret = done.stdout.strip()
    assert secret.startswith("cbk_") and len(secret) > 40 and "\n" not in secret
    assert secret not in done.stderr
    return secret


@dataclass
class Team:
    server: ServerProcess
    config: Path
    db: Path
    secrets: dict[str, str]


async def seed_last_month(db: Path, token_id: str) -> None:
    """A $50 call of alice's from the month before: it never counts toward this month."""
    before = month_window(int(time.time() * 1000))[0] - 1
    store = await SQLiteStore.open(db)
    call = LLMCallRecord(
        call_id="old-call",
        conversation_id="old-conversation",
        turn_id="t0",
        request=b"{}",
        request_hash=hashlib.sha256(b"{}").hexdigest(),
        messages_hash="m" * 64,
        status="committed",
        created_at_ms=before,
        cost_usd=50.0,
        token_id=token_id,
    )
    await store.commit_input(
        "old-conversation",
        input_id="i0",
        expected_version=0,
        state=b"s",
        append_messages=(),
        expected_message_count=0,
        result=b"r",
        llm_calls=(call,),
    )
    await store.close()


@pytest.fixture(scope="module")
def team(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    work = tmp_path_factory.mktemp("team")
    db = work / "byok.db"
    text = config_text(upstream, db, auth_token=OPERATOR)
    config = work / "cursor-byok.toml"
    config.write_text(text)
    secrets = {
        "alice": add_token(config, "alice", "--budget-usd", "2.00"),
        "bob": add_token(config, "bob", "--rpm", "2"),
        "carol": add_token(config, "carol", "--models", "composer"),
        "dave": add_token(config, "dave"),
    }
    listing = token_cli(config, "list")
    assert listing.returncode == 0 and "alice" in listing.stdout and "$2.00" in listing.stdout

    async def alice_id() -> str:
        store = await SQLiteStore.open(db)
        try:
            return next(t.token_id for t in await store.list_access_tokens() if t.name == "alice")
        finally:
            await store.close()

    asyncio.run(seed_last_month(db, asyncio.run(alice_id())))
    with server_process(text, work) as server:
        yield Team(server, config, db, secrets)


async def shim_turn(
    server: ServerProcess, token: str | None, text: str, *, model: str = "brain-1"
) -> tuple[dict[str, Any], str]:
    """One text turn over the shim: the end-stream JSON and the text streamed."""
    async with http(server) as client:
        run = ShimRun(client, token=token)
        async with run.subscribe() as reader:
            await run.append(run_request(text, model=model))
            end = await reader.wait_end()
    return end, "".join(reader.texts)


def refused(end: dict[str, Any], code: str) -> tuple[str, aiserver_pb2.ErrorDetails]:
    error = end.get("error")
    assert error is not None and error["code"] == code, end
    return str(error["message"]), cc.decode_error_details(error)


async def test_the_models_limit_on_http2_and_the_shim(team: Team, upstream: FakeUpstream) -> None:
    prompt = unique("carol asks brain-1")
    client = await cc.H2Client.connect("127.0.0.1", team.server.port)
    try:
        stream = await client.open_run(token=team.secrets["carol"])
        reader = Reader(stream, stream.send)
        await stream.send(run_request(prompt, model="brain-1"))
        end = await reader.wait_end()
        await reader.close()
    finally:
        await client.close()
    message, details = refused(end, "permission_denied")
    assert message == "token 'carol' may not use model 'brain-1' (its models limit: composer)"
    assert details.error == aiserver_pb2.ErrorDetails.ERROR_MODEL_BLOCKED
    assert chat_requests(upstream, prompt) == []  # refused before the provider heard of it
    # Its alias, and the id the alias names, go through (on the shim).
    end, text = await shim_turn(
        team.server, team.secrets["carol"], "carol asks composer", model="composer-test"
    )
    assert end == {} and text == "You said: carol asks composer"


async def test_the_budget_crossed_mid_month(team: Team, upstream: FakeUpstream) -> None:
    alice = team.secrets["alice"]
    # Last month's $50 does not count. Each call holds its bound ($1.20) of the $2.00 until it
    # settles to its cost ($0.50): $0 + $1.20 fits, $0.50 + $1.20 fits, $1.00 + $1.20 does
    # not, so the third call is refused before it goes out and the budget is never passed.
    for n in (1, 2):
        end, text = await shim_turn(team.server, alice, f"alice turn {n}")
        assert end == {} and text == f"You said: alice turn {n}"
    prompt = unique("alice turn 3")
    end, _ = await shim_turn(team.server, alice, prompt)
    message, details = refused(end, "resource_exhausted")
    _, end_ms, month = month_window(int(time.time() * 1000))
    renews = time.strftime("%Y-%m-%d", time.gmtime(end_ms / 1000))
    assert message == (
        "token 'alice' has too little of its monthly budget left for this model call: $1.00 "
        f"spent and $0.00 held by calls in flight of $2.00 in {month} (UTC), and the call may "
        f"cost up to $1.20; it renews on {renews}"
    )
    assert details.error == aiserver_pb2.ErrorDetails.ERROR_RESOURCE_EXHAUSTED
    assert chat_requests(upstream, prompt) == []
    listing = await asyncio.to_thread(token_cli, team.config, "list")
    (row,) = [line for line in listing.stdout.splitlines() if line.startswith("alice")]
    assert "$1.00" in row and "  2  " in row  # this month's spend and calls


async def test_the_rate_limit(team: Team, upstream: FakeUpstream) -> None:
    bob = team.secrets["bob"]
    for n in (1, 2):
        end, _ = await shim_turn(team.server, bob, f"bob turn {n}")
        assert end == {}
    prompt = unique("bob turn 3")
    end, _ = await shim_turn(team.server, bob, prompt)
    message, details = refused(end, "resource_exhausted")
    assert message.startswith(
        "token 'bob' is over its rate limit of 2 model calls per minute; try again in "
    ), message
    assert details.error == aiserver_pb2.ErrorDetails.ERROR_RATE_LIMITED
    assert chat_requests(upstream, prompt) == []


async def test_revocation_takes_effect_at_once(team: Team, upstream: FakeUpstream) -> None:
    """Revoked while its run waits on a tool (an HTTP/2 stream, authenticated when it opened):
    the call after the tool's result is refused, the call in flight before it was not."""
    dave = team.secrets["dave"]
    prompt = unique('[tool Read {"path": "notes.txt"}]')
    client = await cc.H2Client.connect("127.0.0.1", team.server.port)
    try:
        stream = await client.open_run(token=dave)
        reader = Reader(stream, stream.send)
        await stream.send(run_request(prompt))
        ask = await reader.wait_for(exec_of("read_args"))
        done = await asyncio.to_thread(token_process, team.config, "revoke", "dave")
        assert done.returncode == 0, done.stderr
        esm = ask.exec_server_message
        await stream.send(read_ok(esm.id, esm.read_args.path, "secret plans\n"))
        end = await reader.wait_end()
        await reader.close()
    finally:
        await client.close()
    message, details = refused(end, "unauthenticated")
    assert message == "token 'dave' was revoked; ask for a new one"
    assert details.error == aiserver_pb2.ErrorDetails.ERROR_UNAUTHORIZED
    assert len(chat_requests(upstream, prompt)) == 1  # the tool call's; none after the result
    # Within the directory's refresh, the transport refuses it before reading a body.
    deadline = time.monotonic() + 15
    async with http(team.server) as http_client:
        while True:
            r = await cc.append(http_client, "dave-after", 0, run_request("x"), token=dave)
            if r.status_code == 401 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    assert r.status_code == 401, r.text


async def test_the_operator_token_and_the_operator_pages(team: Team) -> None:
    end, text = await shim_turn(team.server, OPERATOR, "operator turn")
    assert end == {} and text == "You said: operator turn"  # no limits
    async with httpx.AsyncClient(base_url=team.server.url, timeout=10) as client:
        nobody = await cc.append(client, "nobody", 0, run_request("nobody"))
        assert nobody.status_code == 401
        person = cc.auth_headers(team.secrets["dave"])
        for path in ("/metrics", "/dashboard/api/summary"):
            assert (await client.get(path, headers=person)).status_code == 401
        operator = cc.auth_headers(OPERATOR)
        metrics = (await client.get("/metrics", headers=operator)).text
        summary = (await client.get("/dashboard/api/summary", headers=operator)).json()
    assert 'cursor_byok_token_llm_calls_total{outcome="ok",token="alice"} 2.0' in metrics
    assert 'cursor_byok_token_cost_usd_total{token="alice"} 1.0' in metrics
    for name, limit in (
        ("carol", "models"),
        ("alice", "budget"),
        ("bob", "rate"),
        ("dave", "revoked"),
    ):
        # (dave's probes after the revocation may count too, until the transport refuses them)
        assert f'cursor_byok_token_refusals_total{{limit="{limit}",token="{name}"}} ' in metrics
        assert f"token={name} refused_by={limit}" in team.server.log()
    assert "token=alice error=" not in team.server.log()  # a run it was allowed has no refusal
    rows = {row["name"]: row for row in summary["tokens"]["tokens"]}
    assert rows["alice"]["cost_usd"] == pytest.approx(2 * CALL_COST)
    assert rows["alice"]["budget_usd"] == 2.0 and rows["bob"]["rpm"] == 2
    assert "dave" not in rows  # revoked
    everything = metrics + str(summary) + team.server.log()
    for path in team.db.parent.glob("byok.db*"):  # the database, its WAL and shared memory
        everything += path.read_bytes().decode("latin-1")
    for name, secret in team.secrets.items():
        assert secret not in everything, name
        assert secret[4:20] not in everything, name
    assert OPERATOR not in everything
    assert hashlib.sha256(team.secrets["alice"].encode()).hexdigest() in everything  # hashed


async def test_loopback_without_tokens_is_open_and_with_one_needs_it(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    db = tmp_path / "byok.db"
    text = config_text(upstream, db, auth_token=None)
    with server_process(text, tmp_path) as server:
        end, answer = await shim_turn(server, None, "no tokens yet")
        assert end == {} and answer == "You said: no tokens yet"
        secret = await asyncio.to_thread(add_token, tmp_path / "cursor-byok.toml", "erin")
        deadline = time.monotonic() + 15
        async with http(server) as client:
            while True:  # the server takes the new token in within its refresh
                r = await cc.append(client, f"probe-{time.monotonic()}", 0, run_request("x"))
                if r.status_code == 401 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
        assert r.status_code == 401
        end, answer = await shim_turn(server, secret, "with erin's token")
        assert end == {} and answer == "You said: with erin's token"


async def test_a_budget_holds_across_two_servers_on_one_database(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Two server processes (replicas) on one database: the spend is summed there, so the
    second server's call counts on the first."""
    db = tmp_path / "shared.db"
    text = config_text(upstream, db, auth_token=OPERATOR)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    config = tmp_path / "a" / "cursor-byok.toml"
    config.write_text(text)
    secret = await asyncio.to_thread(add_token, config, "frank", "--budget-usd", "2.00")
    with (
        server_process(text, tmp_path / "a") as first,
        server_process(text, tmp_path / "b") as second,
    ):
        end, _ = await shim_turn(first, secret, "frank on the first")
        assert end == {}  # "You said: frank on the first": 7 tokens, $0.70
        end, _ = await shim_turn(second, secret, "frank on the second")
        assert end == {}  # $0.70 + its $1.20 bound fit: then $1.40
        end, _ = await shim_turn(first, secret, "frank on the first again")
        message, _ = refused(end, "resource_exhausted")
        assert message.startswith(
            "token 'frank' has too little of its monthly budget left for this model call: "
            "$1.40 spent and $0.00 held by calls in flight of $2.00"
        ), message
