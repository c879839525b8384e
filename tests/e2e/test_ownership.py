"""Ownership through the real server (HTTP/2 and the HTTP/1.1 shim): a conversation and its
runs belong to the person whose token started them. Another person's token is refused
(`permission_denied`) on continuing it, on reopening a run's stream and on appending to it
(cancel included), on reading its context meter; its owner (after a `token rotate` too) and
the operator's `auth_token` are not. Across two server processes on one database (SQLite
file and PostgreSQL) the same holds: ownership is the store's, not a process's memory."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cursor_byok.store import open_store
from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_modes_actions import last_checkpoint, moded_request
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    cancel,
    exec_of,
    http,
    read_ok,
    run_request,
    unique,
)
from tests.e2e.test_token_admin import until
from tests.e2e.test_tokens import add_token, config_text, token_cli
from tests.support import connect_client as cc
from tests.support import postgres
from tests.support.live import ServerProcess, server_process
from tests.support.upstream import FakeUpstream

OPERATOR = "PLANTED-operator-token-owner"


@dataclass
class Team:
    server: ServerProcess
    config: Path
    db: Path
    secrets: dict[str, str]


@pytest.fixture(scope="module")
def team(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    work = tmp_path_factory.mktemp("owners")
    db = work / "byok.db"
    text = config_text(upstream, db, auth_token=OPERATOR)
    config = work / "cursor-byok.toml"
    config.write_text(text)
    secrets = {name: add_token(config, name) for name in ("alice", "bob", "rita", "vic")}
    with server_process(text, work) as server:
        yield Team(server, config, db, secrets)


async def h2_turn(server: ServerProcess, token: str | None, text: str, cid: str) -> dict[str, Any]:
    """One turn of conversation `cid` over HTTP/2: its end-stream JSON."""
    client = await cc.H2Client.connect("127.0.0.1", server.port)
    try:
        stream = await client.open_run(token=token)
        reader = Reader(stream, stream.send)
        await stream.send(run_request(text, cid))
        end = await reader.wait_end()
        await reader.close()
    finally:
        await client.close()
    return end


async def shim_turn(server: ServerProcess, token: str | None, text: str, cid: str) -> Any:
    async with http(server) as client:
        run = ShimRun(client, token=token)
        async with run.subscribe() as reader:
            await run.append(run_request(text, cid))
            end = await reader.wait_end()
    return end, "".join(reader.texts)


def denied(end: dict[str, Any]) -> str:
    error = end.get("error")
    assert error is not None and error["code"] == "permission_denied", end
    return str(error["message"])


async def test_only_its_owner_and_the_operator_continue_a_conversation(
    team: Team, upstream: FakeUpstream
) -> None:
    cid = str(uuid.uuid4())
    alice, bob = team.secrets["alice"], team.secrets["bob"]
    end, text = await shim_turn(team.server, alice, "alice opens it", cid)
    assert end == {} and text == "You said: alice opens it"
    prompt = unique("bob reads alice's chat")
    for end in (
        await h2_turn(team.server, bob, prompt, cid),
        (await shim_turn(team.server, bob, prompt, cid))[0],
    ):
        assert "belongs to someone else" in denied(end)
    assert not any(prompt in r.body.decode() for r in upstream.requests)  # nothing sent
    assert await h2_turn(team.server, alice, "alice again", cid) == {}
    assert await h2_turn(team.server, OPERATOR, "the operator looks", cid) == {}
    store = await open_store(str(team.db))
    try:
        head = await store.head(cid)
        record = await store.load(cid)
    finally:
        await store.close()
    assert head is not None and record is not None
    assert head.owner_id is not None and head.owner_id.startswith("tok_")
    # Three turns committed (alice, alice, the operator), none of bob's.
    assert "bob" not in b"".join(record.messages).decode("latin-1")


async def test_a_rotated_token_keeps_its_conversations(team: Team) -> None:
    cid = str(uuid.uuid4())
    end, _ = await shim_turn(team.server, team.secrets["rita"], "rita starts", cid)
    assert end == {}
    done = await asyncio.to_thread(token_cli, team.config, "rotate", "rita")
    assert done.returncode == 0, done.stderr
    secret = done.stdout.strip()
    assert secret.startswith("cbk_")
    # The server takes the new secret in within its directory's refresh.
    await asyncio.to_thread(until, [team.server], 200, secret)
    end, text = await shim_turn(team.server, secret, "rita, rotated", cid)
    assert end == {} and text == "You said: rita, rotated"


async def test_another_token_cannot_reopen_cancel_or_append_to_a_run(
    team: Team, upstream: FakeUpstream
) -> None:
    """Alice's run waits on a tool; bob knows its request id. Bob's RunSSE and bob's appends
    (a cancel, a tool answer) are refused; alice's turn then ends as her answer says, not
    "canceled by the user"."""
    cid = str(uuid.uuid4())
    alice, bob = team.secrets["alice"], team.secrets["bob"]
    prompt = unique('[tool Read {"path": "plans.txt"}]')
    async with http(team.server) as client:
        run = ShimRun(client, token=alice)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, cid))
            ask = await reader.wait_for(exec_of("read_args"))
            # Bob reopens the stream: refused before it hears anything of alice's run.
            async with cc.runsse(client, run.request_id, token=bob) as sse:
                spy = Reader(sse, lambda _m: asyncio.sleep(0))
                spy_end = await spy.wait_end()
                heard = spy.kinds
                await spy.close()
            assert "belongs to a run someone else started" in denied(spy_end)
            assert not any(k.startswith("exec") or k == "text" for k in heard), heard
            for message in (cancel("bob pressed stop"), read_ok(1, "plans.txt", "bob's text")):
                r = await cc.append(client, run.request_id, run.next_seq(), message, token=bob)
                assert r.status_code != 200, r.text
                assert "permission_denied" in r.text or r.status_code == 403, r.text
            # The refused appends took no seqno of alice's run: her next one is the next.
            run.seq -= 2
            esm = ask.exec_server_message
            await run.append(read_ok(esm.id, esm.read_args.path, "alice's plans\n"))
            end = await reader.wait_end()
    assert end == {} and reader.turn_ended, end
    assert "alice's plans" in "".join(reader.texts)
    assert "bob" not in "".join(reader.texts)


async def test_a_conversation_stored_before_owners_is_the_operators(team: Team) -> None:
    """Stored without an owner (before migration 0013, or while the server was open): a
    person's token may not continue it; the operator may."""
    cid = str(uuid.uuid4())
    store = await open_store(str(team.db))
    try:
        await store.commit_input(
            cid,
            input_id="seed",
            expected_version=0,
            state=b"",
            append_messages=(),
            expected_message_count=0,
            result=b"",
        )
    finally:
        await store.close()
    end = await h2_turn(team.server, team.secrets["alice"], "alice tries", cid)
    denied(end)


async def test_ownership_holds_across_two_processes(
    upstream: FakeUpstream, tmp_path: Path, shared_database: str
) -> None:
    db = shared_database
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    text = config_text(upstream, db, auth_token=OPERATOR)
    config = tmp_path / "cursor-byok.toml"
    config.write_text(text)
    alice = await asyncio.to_thread(add_token, config, "alice")
    bob = await asyncio.to_thread(add_token, config, "bob")
    cid = str(uuid.uuid4())
    with server_process(text, work_a) as a, server_process(text, work_b) as b:
        end, _ = await shim_turn(a, alice, "alice on A", cid)
        assert end == {}
        denied(await h2_turn(b, bob, "bob on B", cid))
        denied((await shim_turn(b, bob, "bob on B, the shim", cid))[0])
        assert await h2_turn(b, alice, "alice on B", cid) == {}
    with postgres.reader(db) as conn:
        owners = conn.execute(
            "SELECT owner_id FROM conversations WHERE conversation_id = ?", (cid,)
        ).fetchall()
    assert len(owners) == 1 and str(owners[0][0]).startswith("tok_")


async def test_a_run_in_flight_at_revocation_ends_at_its_next_call(team: Team) -> None:
    """Vic's run waits on a tool when vic's token is revoked. Once the server refuses vic's
    new requests (a new run, the run's stream reopened: unauthenticated), the run still takes
    vic's append of the tool's result, commits it, and ends at its next model call (refused:
    revoked) at once, not after the tool timeout."""
    cid = str(uuid.uuid4())
    vic = team.secrets["vic"]
    prompt = unique('[tool Read {"path": "vic.txt"}]')
    async with http(team.server) as client:
        run = ShimRun(client, token=vic)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, cid))
            ask = await reader.wait_for(exec_of("read_args"))
            done = await asyncio.to_thread(token_cli, team.config, "revoke", "vic")
            assert done.returncode == 0, done.stderr
            await asyncio.to_thread(until, [team.server], 401, vic)
            async with cc.runsse(client, run.request_id, token=vic) as sse:
                again = Reader(sse, lambda _m: asyncio.sleep(0))
                reopened = await again.wait_end()
                await again.close()
            assert reopened["error"]["code"] == "unauthenticated", reopened
            fresh = await cc.append(client, "vic-new-run", 0, run_request("x"), token=vic)
            assert fresh.status_code == 401, fresh.text
            started = asyncio.get_running_loop().time()
            esm = ask.exec_server_message
            await run.append(read_ok(esm.id, esm.read_args.path, "vic's notes\n"))
            end = await reader.wait_end()
            took = asyncio.get_running_loop().time() - started
    assert end["error"]["code"] == "unauthenticated", end
    assert end["error"]["message"] == "token 'vic' was revoked; ask for a new one"
    assert took < 5, took  # the tool timeout is 600 s
    store = await open_store(str(team.db))
    try:
        record = await store.load(cid)
    finally:
        await store.close()
    assert record is not None
    assert b"vic's notes" in b"".join(record.messages)  # the tool's answer was committed


async def test_the_dashboard_shows_a_person_only_their_own(team: Team) -> None:
    """Opened with a person's token, the dashboard's data holds that person's conversations,
    runs, calls and token alone, and another's conversation is not found; the operator's
    token sees everyone's; /metrics stays the operator's."""
    mine, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    assert (await shim_turn(team.server, team.secrets["alice"], "alice's chart", mine))[0] == {}
    assert (await shim_turn(team.server, team.secrets["bob"], "bob's chart", theirs))[0] == {}
    await asyncio.sleep(0.5)  # run outcomes are stored in the background
    alice = cc.auth_headers(team.secrets["alice"])
    operator = cc.auth_headers(OPERATOR)
    async with httpx.AsyncClient(base_url=team.server.url, timeout=10) as client:
        own = (await client.get("/dashboard/api/summary", headers=alice)).json()
        everyone = (await client.get("/dashboard/api/summary", headers=operator)).json()
        drill = "/dashboard/api/conversation?id="
        found = await client.get(drill + mine, headers=alice)
        hidden = await client.get(drill + theirs, headers=alice)
        seen = await client.get(drill + theirs, headers=operator)
        metrics = await client.get("/metrics", headers=alice)
    conversations = {c["id"] for c in own["conversations"]}
    assert mine in conversations and theirs not in conversations
    assert {r["conversation_id"] for r in own["runs"]} <= conversations
    assert {r["conversation_id"] for r in own["runs"]} >= {mine}
    assert {c["conversation_id"] for c in own["llm_calls"]} <= conversations
    assert [t["name"] for t in own["tokens"]["tokens"]] == ["alice"]
    assert {mine, theirs} <= {c["id"] for c in everyone["conversations"]}
    assert {"alice", "bob"} <= {t["name"] for t in everyone["tokens"]["tokens"]}
    assert found.status_code == 200 and hidden.status_code == 404 and seen.status_code == 200
    assert "bob's chart" not in found.text + str(own)
    assert metrics.status_code == 401


async def h2_run(
    server: ServerProcess, token: str, message: Any, blobs: dict[bytes, bytes]
) -> tuple[dict[str, Any], Reader]:
    """One HTTP/2 run whose client keeps and serves the blobs the server stores (the IDE's)."""
    client = await cc.H2Client.connect("127.0.0.1", server.port)
    try:
        stream = await client.open_run(token=token)
        reader = Reader(stream, stream.send, blobs=blobs)
        await stream.send(message)
        end = await reader.wait_end()
        await reader.close()
    finally:
        await client.close()
    return end, reader


async def test_another_persons_token_cannot_fork_a_conversation(
    team: Team, upstream: FakeUpstream
) -> None:
    """A fork copies its source's history from the store: by its checkpoint (the source's turn
    blobs) or by NotifyConversationClone. Bob forking alice's chat either way is refused
    before any of it reaches his model; alice forks her own."""
    alice, bob = team.secrets["alice"], team.secrets["bob"]
    blobs: dict[bytes, bytes] = {}
    source = str(uuid.uuid4())
    secret = unique("alice's secret plan")
    end, reader = await h2_run(team.server, alice, moded_request(secret, "agent", source), blobs)
    assert end == {}
    checkpoint = last_checkpoint(reader)
    by_blobs = unique("bob forks by blobs")
    end, _ = await h2_run(
        team.server,
        bob,
        moded_request(by_blobs, "agent", str(uuid.uuid4()), state=checkpoint),
        blobs,
    )
    assert "belongs to someone else" in denied(end)
    clone = str(uuid.uuid4())
    async with httpx.AsyncClient(base_url=team.server.url) as client:
        await cc.unary(
            client,
            "/agent.v1.AgentService/NotifyConversationClone",
            agent_pb2.NotifyConversationCloneRequest(
                conversation_id=clone, source_conversation_id=source, source_request_id="r"
            ),
            agent_pb2.NotifyConversationCloneResponse,
            token=bob,
        )
    by_clone = unique("bob forks by clone")
    end, _ = await h2_run(team.server, bob, moded_request(by_clone, "agent", clone), blobs)
    assert "belongs to someone else" in denied(end)
    leaked = [r for r in upstream.requests if secret.encode() in r.body]
    assert not [r for r in leaked if b"bob forks" in r.body]  # none of bob's requests
    mine = unique("alice forks her own")
    end, _ = await h2_run(
        team.server,
        alice,
        moded_request(mine, "agent", str(uuid.uuid4()), state=checkpoint),
        blobs,
    )
    assert end == {}
    (forked,) = [r for r in upstream.requests if mine.encode() in r.body]
    assert secret.encode() in forked.body
