"""Issue 24 §3: NotifyConversationClone's note is kept in the database, so the clone's first
run finds its source on another process (a SQLite file and a PostgreSQL database shared by two
server processes: each test runs on both). Append-only: the first note of a clone wins."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx

from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_forks import Client, _messages, _source
from tests.e2e.test_modes_actions import moded_request
from tests.e2e.test_shim import unique
from tests.support import connect_client as cc
from tests.support import postgres
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream


async def _notify(server: ServerProcess, clone: str, source: str) -> None:
    async with httpx.AsyncClient(base_url=server.url) as http:
        answer = await cc.unary(
            http,
            "/agent.v1.AgentService/NotifyConversationClone",
            agent_pb2.NotifyConversationCloneRequest(
                conversation_id=clone, source_conversation_id=source, source_request_id="r1"
            ),
            agent_pb2.NotifyConversationCloneResponse,
        )
    assert answer == agent_pb2.NotifyConversationCloneResponse()


async def test_a_clone_noted_on_one_process_starts_with_its_history_on_the_other(
    upstream: FakeUpstream, tmp_path: Path, shared_database: str
) -> None:
    db = shared_database
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    with (
        server_process(brain_config(upstream.base_url, db=db), work_a) as a,
        server_process(brain_config(upstream.base_url, db=db), work_b) as b,
    ):
        source, prompts, _ = await _source(Client(a), upstream)
        other, other_prompts, _ = await _source(Client(a), upstream)
        clone = str(uuid.uuid4())
        await _notify(a, clone, source)  # noted on A
        await _notify(b, clone, other)  # a later note of the same clone: the first wins
        asked = unique("clone question on B")
        await Client(b).run(moded_request(asked, "agent", clone))  # its first run, on B
    forked = json.dumps(_messages(upstream, asked))
    assert prompts[0] in forked and prompts[1] in forked
    assert other_prompts[0] not in forked
    with postgres.reader(db) as conn:
        rows = conn.execute(
            "SELECT source_conversation_id FROM clone_notes WHERE conversation_id = ?", (clone,)
        ).fetchall()
    assert [r[0] for r in rows] == [source]
