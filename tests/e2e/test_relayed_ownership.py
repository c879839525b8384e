"""Ownership of a shim run's appends between replicas (issue 25's leftover): on PostgreSQL a
`BidiAppend` may land on a replica that does not hold its run's `RunSSE`; it is stored there
and relayed (transport/connect/relay.py). Wherever it lands, another person's append to the
run (a cancel, a tool answer) is refused with `permission_denied` before it is stored, and an
append stored before the run's owner was known never reaches the run; the owner's appends and
the operator's are taken. Two real server processes on one real PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import psycopg
import pytest

from tests.e2e.test_ownership import OPERATOR
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    cancel,
    chat_requests,
    exec_of,
    http,
    read_ok,
    run_request,
    unique,
)
from tests.e2e.test_tokens import add_token, config_text
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, server_process
from tests.support.postgres import Cluster
from tests.support.upstream import FakeUpstream


@dataclass
class Pair:
    a: ServerProcess
    b: ServerProcess
    db: str
    secrets: dict[str, str]


@pytest.fixture(scope="module")
def pair(
    upstream: FakeUpstream, pg_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    work = tmp_path_factory.mktemp("relayed")
    db = pg_cluster.create_database(f"relayed_{uuid.uuid4().hex[:8]}")
    text = config_text(upstream, db, auth_token=OPERATOR)
    config = work / "cursor-byok.toml"
    config.write_text(text)
    secrets = {name: add_token(config, name) for name in ("alice", "bob")}
    (work / "a").mkdir()
    (work / "b").mkdir()
    with server_process(text, work / "a") as a, server_process(text, work / "b") as b:
        yield Pair(a, b, db, secrets)


@contextlib.asynccontextmanager
async def clients(pair: Pair) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    async with http(pair.a) as on_a, http(pair.b) as on_b:
        yield on_a, on_b


def refused(r: httpx.Response) -> str:
    assert r.status_code == 403, (r.status_code, r.text)
    body = r.json()
    assert body["code"] == "permission_denied", body
    return str(body["message"])


def stored_persons(db: str, request_id: str) -> list[str | None]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT person FROM run_appends WHERE request_id = %s ORDER BY seqno", (request_id,)
        ).fetchall()
    return [r[0] for r in rows]


async def test_another_persons_append_is_refused_on_either_replica(
    pair: Pair, upstream: FakeUpstream
) -> None:
    """Alice's RunSSE is on A, her run waits on a tool. Bob's cancel and tool answer are
    refused on B (which does not hold the run: before, they were stored and relayed, and the
    turn ended "canceled by the user") and on A; even a seqno alice already used is refused,
    not answered "duplicate". Alice's own answer, sent to B, is relayed: her turn ends as her
    answer says."""
    alice, bob = pair.secrets["alice"], pair.secrets["bob"]
    cid = str(uuid.uuid4())
    prompt = unique('[tool Read {"path": "plans.txt"}]')
    async with clients(pair) as (on_a, on_b):
        run = ShimRun(on_a, token=alice)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, cid))
            ask = await reader.wait_for(exec_of("read_args"), 20)
            esm = ask.exec_server_message
            seq = run.seq
            for client in (on_b, on_a):
                for message in (cancel("bob pressed stop"), read_ok(esm.id, "x", "bob's text")):
                    r = await cc.append(client, run.request_id, seq, message, token=bob)
                    assert "someone else started" in refused(r)
            r = await cc.append(on_b, run.request_id, 0, cancel("bob again"), token=bob)
            refused(r)  # seqno 0 is stored (alice's run request): refused, not a duplicate
            persons = stored_persons(pair.db, run.request_id)
            # Alice's appends only (her run request, her client's answers), none of bob's.
            assert len(persons) == seq and len(set(persons)) == 1, persons
            assert str(persons[0]).startswith("tok_"), persons
            answer = read_ok(esm.id, esm.read_args.path, "alice's plans\n")
            r = await cc.append(on_b, run.request_id, seq, answer, token=alice)
            assert r.status_code == 200, r.text
            run.seq = seq + 1
            end = await reader.wait_end(20)
    assert end == {} and reader.turn_ended, end
    assert "alice's plans" in "".join(reader.texts)
    tool = [m for m in chat_requests(upstream, prompt)[-1]["messages"] if m["role"] == "tool"]
    assert len(tool) == 1 and "alice's plans" in tool[0]["content"], tool


async def test_the_operators_append_to_a_persons_run_is_relayed(pair: Pair) -> None:
    """The operator's `auth_token` sees every run: its tool answer to alice's run, sent to
    the replica that does not hold it, is taken."""
    cid = str(uuid.uuid4())
    async with clients(pair) as (on_a, on_b):
        run = ShimRun(on_a, token=pair.secrets["alice"])
        async with run.subscribe() as reader:
            await run.append(run_request(unique('[tool Read {"path": "ops.txt"}]'), cid))
            ask = await reader.wait_for(exec_of("read_args"), 20)
            esm = ask.exec_server_message
            answer = read_ok(esm.id, esm.read_args.path, "the operator's lines\n")
            r = await cc.append(on_b, run.request_id, run.seq, answer, token=OPERATOR)
            assert r.status_code == 200, r.text
            end = await reader.wait_end(20)
    assert end == {} and "the operator's lines" in "".join(reader.texts), end


async def test_an_append_stored_before_the_runs_stream_never_reaches_another_persons_run(
    pair: Pair, upstream: FakeUpstream
) -> None:
    """Bob knows a request id before its run starts and stores a run request under it on B,
    naming alice's conversation. Alice then opens that run's RunSSE on A: bob's stored append
    is not hers, so her run never takes it (before: it ran bob's prompt in alice's
    conversation, on alice's token); alice's own run request under that id is refused, the
    id being bob's first."""
    alice, bob = pair.secrets["alice"], pair.secrets["bob"]
    cid = str(uuid.uuid4())
    async with clients(pair) as (on_a, on_b):
        mine = ShimRun(on_a, token=alice)
        async with mine.subscribe() as reader:
            await mine.append(run_request("alice's first turn", cid))
            assert await reader.wait_end(20) == {}
        prompt = unique("bob writes in alice's chat")
        rid = str(uuid.uuid4())
        r = await cc.append(on_b, rid, 0, run_request(prompt, cid), token=bob)
        assert r.status_code == 200, r.text  # a run of bob's, for all B can tell
        async with cc.runsse(on_a, rid, token=alice) as sse:
            spy = Reader(sse, lambda _m: asyncio.sleep(0))
            r = await cc.append(on_a, rid, 0, run_request("alice's", cid), token=alice)
            assert "someone else started" in refused(r)
            await asyncio.sleep(3)  # the time bob's prompt took to reach the model, before
            assert spy.end is None, spy.end
            await spy.close()
        assert not chat_requests(upstream, prompt), "bob's prompt reached the model"
        assert not any(k == "text" for k in spy.kinds), spy.kinds


async def test_another_persons_runsse_reopened_on_the_other_replica_leaves_the_run_alone(
    pair: Pair, upstream: FakeUpstream
) -> None:
    """Alice's run waits on a tool on A. Bob reopens its RunSSE on B, which does not hold it
    (B would find the run's stored request and resume it under bob's token): refused with
    `permission_denied` before the run is claimed, so alice's turn goes on, on A."""
    alice, bob = pair.secrets["alice"], pair.secrets["bob"]
    cid = str(uuid.uuid4())
    prompt = unique('[tool Read {"path": "reopened.txt"}]')
    async with clients(pair) as (on_a, on_b):
        run = ShimRun(on_a, token=alice)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, cid))
            ask = await reader.wait_for(exec_of("read_args"), 20)
            async with cc.runsse(on_b, run.request_id, token=bob) as sse:
                spy = Reader(sse, lambda _m: asyncio.sleep(0))
                spy_end = await spy.wait_end(20)
                heard = spy.kinds
                await spy.close()
            await asyncio.sleep(1.0)  # a claim from B would have reached A by now
            esm = ask.exec_server_message
            await run.append(read_ok(esm.id, esm.read_args.path, "alice's own\n"))
            end = await reader.wait_end(20)
    assert spy_end.get("error", {}).get("code") == "permission_denied", spy_end
    assert not any(k.startswith("exec") or k.endswith("text_delta") for k in heard), heard
    assert end == {} and reader.turn_ended, end
    assert "alice's own" in "".join(reader.texts)
