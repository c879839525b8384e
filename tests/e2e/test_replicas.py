"""Replicas: several server processes on one PostgreSQL database (docs/deploy.md, "Replicas").

A newer run of a conversation supersedes the busy one across replicas as it does inside one
process: the replica that takes the conversation announces it through the database (NOTIFY),
and the holder on the other replica gives way at once, not only when its next commit fails
the version check.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from cursor_byok.launch import free_port, probe_health_blocking
from cursor_byok.llm.types import AssistantMessage, UserMessage
from tests.e2e import test_crash_recovery as crash
from tests.e2e.test_shim import (
    ShimRun,
    chat_requests,
    exec_of,
    http,
    is_text,
    read_ok,
    run_request,
    unique,
)
from tests.e2e.test_two_processes import history
from tests.paths import REPO
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.postgres import Cluster
from tests.support.upstream import FakeUpstream

SLOW_S = 40  # the holder's answer streams this long: far beyond the bound asserted below


async def test_a_newer_run_on_another_replica_supersedes_the_busy_one_at_once(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    db = pg_cluster.create_database(f"replicas_{uuid.uuid4().hex[:8]}")
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    conversation = str(uuid.uuid4())
    slow = unique(f"[slow {SLOW_S}] from replica A")
    fast = unique("from replica B")
    with (
        server_process(brain_config(upstream.base_url, db=db), work_a) as a,
        server_process(brain_config(upstream.base_url, db=db), work_b) as b,
    ):
        async with http(a) as client_a, http(b) as client_b:
            run_a = ShimRun(client_a)
            run_b = ShimRun(client_b)
            async with run_a.subscribe() as reader_a:
                await run_a.append(run_request(slow, conversation))
                await reader_a.wait_for(is_text)  # A is streaming its slow answer
                started = time.monotonic()
                async with run_b.subscribe() as reader_b:
                    await run_b.append(run_request(fast, conversation))
                    end_a = await reader_a.wait_end(SLOW_S + 20)
                    a_gave_way_s = time.monotonic() - started
                    end_b = await reader_b.wait_end(30)
        logs = a.log() + b.log()
    assert end_a.get("error", {}).get("code") == "canceled", (end_a, logs)
    assert not reader_a.turn_ended
    # Without the claim A streams on for SLOW_S seconds and only then finds the version moved.
    assert a_gave_way_s < SLOW_S / 3, (a_gave_way_s, logs)
    assert "gives way" in a.log()
    assert end_b == {} and reader_b.turn_ended
    messages = history(db, conversation)
    assert [type(m) for m in messages] == [UserMessage, UserMessage, AssistantMessage]
    assert isinstance(messages[-1], AssistantMessage)
    assert messages[-1].text == f"You said: {fast}"


def nginx_config(front: int, replicas: tuple[int, int], folder: Path) -> str:
    """The nginx configuration of docs/deploy.md ("Replicas"), as written there, with this
    test's ports, wrapped in the main context nginx needs to run from a temporary folder."""
    text = (REPO / "docs" / "deploy.md").read_text()
    section = text[text.index("## Replicas") :]  # the TLS section has a site of its own
    block = section.split("```nginx\n", 1)[1].split("```", 1)[0]
    block = block.replace("listen 8700;", f"listen 127.0.0.1:{front};")
    block = block.replace("127.0.0.1:8701", f"127.0.0.1:{replicas[0]}")
    block = block.replace("127.0.0.1:8702", f"127.0.0.1:{replicas[1]}")
    return (
        f"daemon off;\npid {folder}/nginx.pid;\nerror_log {folder}/error.log;\n"
        "events { worker_connections 256; }\n"
        "http {\nlog_format sticky '$http_x_request_id $upstream_addr $request_uri';\n"
        f"access_log {folder}/access.log sticky;\nclient_body_temp_path {folder}/body;\n"
        f"proxy_temp_path {folder}/proxy;\n{block}\n}}\n"
    )


async def test_shim_runs_through_nginx_stick_to_one_replica_each(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    """The documented nginx configuration, run: every run's RunSSE and BidiAppend reach the
    same replica (hash on x-request-id), runs spread over both replicas, every turn ends."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    assert Path(nginx).exists(), "nginx missing: run scripts/install_postgres.sh"
    db = pg_cluster.create_database(f"sticky_{uuid.uuid4().hex[:8]}")
    work_a, work_b, front = tmp_path / "a", tmp_path / "b", tmp_path / "nginx"
    for folder in (work_a, work_b, front):
        folder.mkdir()
    front_port = free_port()
    with (
        server_process(brain_config(upstream.base_url, db=db), work_a) as a,
        server_process(brain_config(upstream.base_url, db=db), work_b) as b,
    ):
        conf = front / "nginx.conf"
        conf.write_text(nginx_config(front_port, (a.port, b.port), front))
        proxy = subprocess.Popen(
            [nginx, "-p", str(front), "-c", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 10
            while not probe_health_blocking("127.0.0.1", front_port):
                assert proxy.poll() is None, proxy.stderr.read() if proxy.stderr else ""
                assert time.monotonic() < deadline, "nginx did not answer"
                time.sleep(0.05)
            via = ServerProcess(f"http://127.0.0.1:{front_port}", front_port, proxy, conf)
            request_ids = []
            async with http(via) as client:
                for i in range(16):
                    run = ShimRun(client)
                    prompt = unique(f"through nginx {i}")
                    async with run.subscribe() as reader:
                        await run.append(run_request(prompt, str(uuid.uuid4())))
                        end = await reader.wait_end(20)
                    assert end == {} and reader.turn_ended, (i, end)
                    request_ids.append(run.request_id)
        finally:
            proxy.terminate()
            proxy.wait(10)
        log_a, log_b = a.log(), b.log()
    # nginx's own record: every request of a run (its RunSSE, its BidiAppends) went to one
    # replica. Without the hash they alternate (the appends would still arrive, relayed
    # through the database, so only this shows that routing is sticky).
    upstreams: dict[str, set[str]] = {}
    for line in (front / "access.log").read_text().splitlines():
        rid, addr, _uri = line.split(" ", 2)
        upstreams.setdefault(rid, set()).add(addr)
    for rid in request_ids:
        assert len(upstreams.get(rid, set())) == 1, (rid, upstreams.get(rid))
    served_a = [r for r in request_ids if f"request_id={r}" in log_a]
    served_b = [r for r in request_ids if f"request_id={r}" in log_b]
    assert sorted(served_a + served_b) == sorted(request_ids)  # each run on exactly one
    assert served_a and served_b, "the hash spread 16 runs over both replicas"


async def test_kill9_of_the_replica_holding_a_turn_then_the_other_replica_takes_it_over(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    """Replica A streams a turn's answer and dies (kill -9); the client reopens the RunSSE of
    the same request id on replica B without re-sending its appends. B finds the run in the
    database, resends the identical upstream request and the answer is committed once."""
    upstream.requests.clear()  # requests_with() counts this test's requests only
    db = pg_cluster.create_database(f"failover_{uuid.uuid4().hex[:8]}")
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    conversation = f"conv-failover-{uuid.uuid4().hex[:8]}"
    prompt = unique("failover: tell me something")
    answer = f"You said: {prompt}"
    upstream.push(crash.partial_then_hang("HALF-ANSWER-NEVER-COMMITTED " * 3))
    with (
        server_process(brain_config(upstream.base_url, db=db), work_a) as a,
        server_process(brain_config(upstream.base_url, db=db), work_b) as b,
    ):
        async with crash.shim_http(a.url) as on_a:
            run1 = crash.ShimRun(on_a, f"req-{uuid.uuid4()}", crash.ScriptedClient())
            try:
                await run1.open(crash.user_run_request(conversation, prompt))
                await run1.wait_for(lambda: len(run1.result.texts) >= 3, "text deltas")
                assert len(crash.db_calls(db, conversation)) == 1
                a.kill9()
                await run1.finish()
            finally:
                await run1.close()
        assert run1.text.startswith("HALF-ANSWER") and not run1.result.turn_ended
        async with crash.shim_http(b.url) as on_b:
            run2 = crash.ShimRun(on_b, run1.request_id, crash.ScriptedClient())
            run2.seqno = run1.seqno  # a reopening client goes on counting its appends
            try:
                await run2.open(None)
                await run2.finish()
            finally:
                await run2.close()
        logs = a.log() + b.log()
    assert run2.result.turn_ended and run2.result.error is None, run2.describe() + logs
    assert run2.text == answer, run2.describe()
    sent = crash.requests_with(upstream, prompt)
    assert len(sent) == 2, f"expected the call once more on replica B, got {len(sent)}"
    assert sent[1].body == sent[0].body, "the retried request is not byte-identical"
    messages = crash.decoded(crash.db_messages(db, conversation))
    crash.assert_one_answer(messages, answer)
    assert not any("HALF-ANSWER" in getattr(m, "text", "") for m in messages)
    calls = crash.db_calls(db, conversation)
    assert len(calls) == 1 and calls[0][2] == "committed", calls


class AlternatingRun(ShimRun):
    """A shim run whose RunSSE is on one replica and whose appends alternate: even
    append_seqno to the other replica, odd ones to the RunSSE's own."""

    def __init__(self, holder: httpx.AsyncClient, other: httpx.AsyncClient) -> None:
        super().__init__(holder)
        self.other = other

    async def append(self, message: Any, seqno: int | None = None, **kw: Any) -> httpx.Response:
        if seqno is None:
            seqno = self.next_seq()
        else:
            self.seq = max(self.seq, seqno + 1)
        client = self.other if seqno % 2 == 0 else self.client
        r = await cc.append(client, self.request_id, seqno, message, token=self.token, **kw)
        assert r.status_code == 200, (r.status_code, r.text)
        return r


async def test_shim_appends_to_alternating_replicas_reach_the_runsse_holder_once(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    """RunSSE on replica A; the run request goes to B, the tool result to A and again to B
    (a client retrying on another replica). Each append is stored first and delivered to A
    through the database, in order and once: one turn, one tool result, one answer."""
    db = pg_cluster.create_database(f"appends_{uuid.uuid4().hex[:8]}")
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    conversation = str(uuid.uuid4())
    prompt = unique('[tool Read {"path": "/home/tester/project-e2e/notes.md"}]')
    with (
        server_process(brain_config(upstream.base_url, db=db), work_a) as a,
        server_process(brain_config(upstream.base_url, db=db), work_b) as b,
    ):
        async with http(a) as client_a, http(b) as client_b:
            run = AlternatingRun(client_a, client_b)
            async with run.subscribe() as reader:
                await run.append(run_request(prompt, conversation))  # seqno 0: to B
                ask = await reader.wait_for(exec_of("read_args"), 20)
                esm = ask.exec_server_message
                result = read_ok(esm.id, esm.read_args.path, "line one\nline two\n")
                seqno = run.seq
                await run.append(result, seqno=seqno)  # odd: to A
                # the same append again, now to the replica that does not hold the run
                r = await cc.append(client_b, run.request_id, seqno, result)
                assert r.status_code == 200, r.text
                end = await reader.wait_end(20)
        logs = a.log() + b.log()
    assert end == {} and reader.turn_ended, logs
    assert "line one" in "".join(reader.texts)
    _first, second = chat_requests(upstream, prompt)  # one turn: two model calls, no more
    tool = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool) == 1 and "line two" in tool[0]["content"]
    assert f"request_id={run.request_id}" in a.log()
    assert f"request_id={run.request_id}" not in b.log()  # B never ran it
    messages = history(db, conversation)
    assert [type(m).__name__ for m in messages].count("AssistantMessage") >= 1
    assert sum(isinstance(m, UserMessage) for m in messages) == 1


async def test_a_runsse_reopened_on_another_replica_continues_the_turn_once(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    """The client's RunSSE drops while replica A streams the answer and is reopened on B (a
    balancer without stickiness, or A draining), with no append sent again. B reads the run's
    stored appends, A's run gives way, and B answers the turn: one answer in the history."""
    upstream.requests.clear()
    db = pg_cluster.create_database(f"reopen_{uuid.uuid4().hex[:8]}")
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    conversation = str(uuid.uuid4())
    prompt = unique("[slow 6] reopened elsewhere")
    with (
        server_process(brain_config(upstream.base_url, db=db), work_a) as a,
        server_process(brain_config(upstream.base_url, db=db), work_b) as b,
    ):
        async with http(a) as client_a, http(b) as client_b:
            on_a = ShimRun(client_a)
            async with on_a.subscribe() as first:
                await on_a.append(run_request(prompt, conversation))
                await first.wait_for(is_text)
            on_b = ShimRun(client_b)
            on_b.request_id = on_a.request_id
            on_b.seq = on_a.seq
            async with on_b.subscribe() as second:
                end = await second.wait_end(30)
        logs = a.log() + b.log()
    assert end == {} and second.turn_ended, (end, logs)
    assert f"You said: {prompt}" in "".join(second.texts)
    messages = history(db, conversation)
    assert [type(m) for m in messages] == [UserMessage, AssistantMessage], messages
    assert messages[-1].text == f"You said: {prompt}"
